package mvcc

import pb "go.etcd.io/etcd/api/v3/etcdserverpb"

// batchKeys returns, once each, the single keys the write requests of batch
// will read: what a Prefetcher loads before the batch is applied.
func batchKeys(batch []*request) [][]byte {
	seen := map[string]bool{}
	var keys [][]byte
	add := func(key, end []byte) {
		if len(end) != 0 || seen[string(key)] {
			return
		}
		seen[string(key)] = true
		keys = append(keys, key)
	}
	var addTxn func(t *pb.TxnRequest)
	addOps := func(ops []*pb.RequestOp) {
		for _, op := range ops {
			switch {
			case op.GetRequestPut() != nil:
				add(op.GetRequestPut().Key, nil)
			case op.GetRequestRange() != nil:
				add(op.GetRequestRange().Key, op.GetRequestRange().RangeEnd)
			case op.GetRequestDeleteRange() != nil:
				add(op.GetRequestDeleteRange().Key, op.GetRequestDeleteRange().RangeEnd)
			case op.GetRequestTxn() != nil:
				addTxn(op.GetRequestTxn())
			}
		}
	}
	addTxn = func(t *pb.TxnRequest) {
		for _, c := range t.Compare {
			add(c.Key, c.RangeEnd)
		}
		addOps(t.Success)
		addOps(t.Failure)
	}
	for _, p := range batch {
		switch r := p.req; {
		case r == nil:
		case r.Put != nil:
			add(r.Put.Key, nil)
		case r.DeleteRange != nil:
			add(r.DeleteRange.Key, r.DeleteRange.RangeEnd)
		case r.Txn != nil:
			addTxn(r.Txn)
		}
	}
	return keys
}
