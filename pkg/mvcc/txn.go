package mvcc

import (
	"bytes"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// applyTxn runs etcd's general transaction: compares choose a branch at every
// level (evaluated against the state before the txn), every chosen operation
// is checked before anything is written, then the operations run in order,
// each seeing the writes before it. All changes share one revision.
func (a *evaluator) applyTxn(t *pb.TxnRequest) (*pb.TxnResponse, error) {
	// Until executeTxn writes, a key's live row is read once (liveRow).
	a.before = map[string]*mvccpb.KeyValue{}
	defer func() { a.before, a.checked = nil, nil }()
	path, err := a.txnPath(t)
	if err != nil {
		return nil, err
	}
	prevs := map[string]*mvccpb.KeyValue{}
	if _, err := a.checkTxn(t, path, prevs); err != nil {
		return nil, err
	}
	// From here the txn writes: a row read before is still the key's row
	// only until then (rowsToDelete).
	a.before, a.checked = nil, a.before
	resp, _, err := a.newTxnResp(t, path)
	if err != nil {
		return nil, err
	}
	if _, err := a.executeTxn(t, path, resp, prevs); err != nil {
		return nil, err
	}
	resp.Header.Revision = a.readRev()
	return resp, nil
}

// txnPath records, depth first, the branch taken by t and by every nested
// txn of the taken branches.
func (a *evaluator) txnPath(t *pb.TxnRequest) ([]bool, error) {
	ok, err := a.compares(t.Compare)
	if err != nil {
		return nil, err
	}
	path := []bool{ok}
	for _, op := range branch(t, ok) {
		if nested := op.GetRequestTxn(); nested != nil {
			sub, err := a.txnPath(nested)
			if err != nil {
				return nil, err
			}
			path = append(path, sub...)
		}
	}
	return path, nil
}

func branch(t *pb.TxnRequest, ok bool) []*pb.RequestOp {
	if ok {
		return t.Success
	}
	return t.Failure
}

func (a *evaluator) compares(cs []*pb.Compare) (bool, error) {
	for _, c := range cs {
		ok, err := a.compare(c)
		if err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

// compare follows etcd: over a range every existing key must satisfy it; a
// VALUE compare on no key fails; other targets on no key compare zero values.
func (a *evaluator) compare(c *pb.Compare) (bool, error) {
	var kvs []*mvccpb.KeyValue
	if len(c.RangeEnd) == 0 {
		// One key: its live row, shared with a put of the same key.
		kv, err := a.liveRow(c.Key)
		if err != nil {
			return false, fmt.Errorf("get for compare: %w", err)
		}
		if kv != nil {
			kvs = []*mvccpb.KeyValue{kv}
		}
	} else {
		var err error
		keysOnly := c.Target != pb.Compare_VALUE
		if kvs, err = a.tx.Range(a.ctx, c.Key, rangeEnd(c.RangeEnd), a.current, 0, keysOnly); err != nil {
			return false, fmt.Errorf("range for compare: %w", err)
		}
	}
	if len(kvs) == 0 {
		if c.Target == pb.Compare_VALUE {
			return false, nil
		}
		return compareKV(c, &mvccpb.KeyValue{}), nil
	}
	for _, kv := range kvs {
		if !compareKV(c, kv) {
			return false, nil
		}
	}
	return true, nil
}

func compareKV(c *pb.Compare, kv *mvccpb.KeyValue) bool {
	var result int
	switch c.Target {
	case pb.Compare_VALUE:
		result = bytes.Compare(kv.Value, c.GetValue())
	case pb.Compare_CREATE:
		result = cmpInt(kv.CreateRevision, c.GetCreateRevision())
	case pb.Compare_MOD:
		result = cmpInt(kv.ModRevision, c.GetModRevision())
	case pb.Compare_VERSION:
		result = cmpInt(kv.Version, c.GetVersion())
	case pb.Compare_LEASE:
		result = cmpInt(kv.Lease, c.GetLease())
	}
	switch c.Result {
	case pb.Compare_EQUAL:
		return result == 0
	case pb.Compare_NOT_EQUAL:
		return result != 0
	case pb.Compare_GREATER:
		return result > 0
	case pb.Compare_LESS:
		return result < 0
	}
	return true
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// checkTxnRangeRevision is etcd's check of a range inside a txn, which
// differs from a plain Range's for negative revisions: etcd compares them
// with its compacted revision (etcdCompacted), so a range at -1 fails with
// ErrCompacted once anything was compacted (and one below -1 always does).
func checkTxnRangeRevision(rev, current, compacted int64) error {
	if rev < 0 {
		if rev < etcdCompacted(compacted) {
			return ErrCompacted
		}
		return nil
	}
	_, err := checkRevision(rev, current, compacted)
	return err
}

// etcdCompacted is the compacted revision as etcd holds it: -1 until the
// first compaction, where kite stores 0.
func etcdCompacted(compacted int64) int64 {
	if compacted == 0 {
		return -1
	}
	return compacted
}

// checkTxn validates the chosen operations before any write, so a rejected
// txn leaves no trace. It records the previous row of each put's key.
func (a *evaluator) checkTxn(t *pb.TxnRequest, path []bool, prevs map[string]*mvccpb.KeyValue) (int, error) {
	used := 0
	for _, op := range branch(t, path[0]) {
		switch r := op.Request.(type) {
		case *pb.RequestOp_RequestRange:
			if r.RequestRange == nil {
				continue
			}
			if err := checkTxnRangeRevision(r.RequestRange.Revision, a.current, a.compacted); err != nil {
				return 0, err
			}
		case *pb.RequestOp_RequestPut:
			if r.RequestPut == nil {
				continue
			}
			// Inside a txn rows are read whole (liveMeta).
			prev, _, err := a.checkPut(r.RequestPut)
			if err != nil {
				return 0, err
			}
			prevs[string(r.RequestPut.Key)] = prev
		case *pb.RequestOp_RequestTxn:
			if r.RequestTxn == nil {
				continue
			}
			n, err := a.checkTxn(r.RequestTxn, path[1+used:], prevs)
			if err != nil {
				return 0, err
			}
			used += n + 1
		}
	}
	return used, nil
}

// newTxnResp allocates the response tree for the taken path; nested txn
// responses carry an empty header, as etcd's do.
func (a *evaluator) newTxnResp(t *pb.TxnRequest, path []bool) (*pb.TxnResponse, int, error) {
	ops := branch(t, path[0])
	resp := &pb.TxnResponse{Succeeded: path[0], Header: &pb.ResponseHeader{}, Responses: make([]*pb.ResponseOp, len(ops))}
	used := 0
	for i, op := range ops {
		switch r := op.Request.(type) {
		case *pb.RequestOp_RequestRange:
			resp.Responses[i] = &pb.ResponseOp{Response: &pb.ResponseOp_ResponseRange{}}
		case *pb.RequestOp_RequestPut:
			resp.Responses[i] = &pb.ResponseOp{Response: &pb.ResponseOp_ResponsePut{}}
		case *pb.RequestOp_RequestDeleteRange:
			resp.Responses[i] = &pb.ResponseOp{Response: &pb.ResponseOp_ResponseDeleteRange{}}
		case *pb.RequestOp_RequestTxn:
			if r.RequestTxn == nil {
				resp.Responses[i] = &pb.ResponseOp{Response: &pb.ResponseOp_ResponseTxn{}}
				continue
			}
			nested, n, err := a.newTxnResp(r.RequestTxn, path[1+used:])
			if err != nil {
				return nil, 0, err
			}
			resp.Responses[i] = &pb.ResponseOp{Response: &pb.ResponseOp_ResponseTxn{ResponseTxn: nested}}
			used += n + 1
		default:
			resp.Responses[i] = &pb.ResponseOp{}
		}
	}
	return resp, used, nil
}

func (a *evaluator) executeTxn(t *pb.TxnRequest, path []bool, resp *pb.TxnResponse, prevs map[string]*mvccpb.KeyValue) (int, error) {
	used := 0
	for i, op := range branch(t, path[0]) {
		out := resp.Responses[i].Response
		switch r := op.Request.(type) {
		case *pb.RequestOp_RequestRange:
			if r.RequestRange == nil {
				continue
			}
			rr, err := executeRange(a.ctx, a.tx, r.RequestRange, a.readRev(), a.compacted, true)
			if err != nil {
				return 0, fmt.Errorf("txn range: %w", err)
			}
			out.(*pb.ResponseOp_ResponseRange).ResponseRange = rr
		case *pb.RequestOp_RequestPut:
			if r.RequestPut == nil {
				continue
			}
			prev, err := a.prevAtExecution(r.RequestPut.Key, prevs)
			if err != nil {
				return 0, err
			}
			pr, err := a.put(r.RequestPut, prev, false)
			if err != nil {
				return 0, err
			}
			out.(*pb.ResponseOp_ResponsePut).ResponsePut = pr
		case *pb.RequestOp_RequestDeleteRange:
			if r.RequestDeleteRange == nil {
				continue
			}
			dr, err := a.applyDeleteRange(r.RequestDeleteRange)
			if err != nil {
				return 0, err
			}
			out.(*pb.ResponseOp_ResponseDeleteRange).ResponseDeleteRange = dr
		case *pb.RequestOp_RequestTxn:
			if r.RequestTxn == nil {
				continue
			}
			n, err := a.executeTxn(r.RequestTxn, path[1+used:], out.(*pb.ResponseOp_ResponseTxn).ResponseTxn, prevs)
			if err != nil {
				return 0, err
			}
			used += n + 1
		}
	}
	return used, nil
}

// prevAtExecution returns the row a txn's put replaces. It is the row seen by
// checkTxn unless the txn has deleted keys since: etcd lets a from-key delete
// and a put of one of its keys share a txn, and then the put creates the key
// anew (version 1, create revision = this revision).
func (a *evaluator) prevAtExecution(key []byte, prevs map[string]*mvccpb.KeyValue) (*mvccpb.KeyValue, error) {
	if !a.deleted {
		return prevs[string(key)], nil
	}
	prev, err := a.tx.Get(a.ctx, key)
	if err != nil {
		return nil, fmt.Errorf("get previous kv: %w", err)
	}
	return prev, nil
}
