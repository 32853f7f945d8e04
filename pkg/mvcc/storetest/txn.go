package storetest

import (
	"bytes"
	"cmp"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/kite-db/kite/pkg/mvcc"
)

// choice is the branch a txn takes and, for each operation of that branch
// that is a nested txn, the branch it takes. etcd decides every level
// against the state before the txn, before anything executes.
type choice struct {
	succeeded bool
	nested    []*choice // by operation index; nil for non-txn operations
}

func branchOps(t *pb.TxnRequest, succeeded bool) []*pb.RequestOp {
	if succeeded {
		return t.Success
	}
	return t.Failure
}

func (m *model) choose(t *pb.TxnRequest, before map[string]*mvccpb.KeyValue) *choice {
	c := &choice{succeeded: compares(t.Compare, before)}
	ops := branchOps(t, c.succeeded)
	c.nested = make([]*choice, len(ops))
	for i, op := range ops {
		if n := op.GetRequestTxn(); n != nil {
			c.nested[i] = m.choose(n, before)
		}
	}
	return c
}

func (m *model) txn(t *pb.TxnRequest) (*pb.TxnResponse, error) {
	before := m.live()
	c := m.choose(t, before)
	if err := m.checkTxn(t, c, before); err != nil {
		return nil, err
	}
	w := m.begin()
	resp := w.execTxn(t, c)
	resp.Header = hdr(w.readRev())
	w.commit()
	return resp, nil
}

// checkTxn checks the chosen operations in order, as etcd does before it
// executes any: a txn that fails a check changes nothing.
func (m *model) checkTxn(t *pb.TxnRequest, c *choice, before map[string]*mvccpb.KeyValue) error {
	for i, op := range branchOps(t, c.succeeded) {
		var err error
		switch r := op.Request.(type) {
		case *pb.RequestOp_RequestRange:
			err = m.checkTxnRange(r.RequestRange.Revision)
		case *pb.RequestOp_RequestPut:
			err = m.checkPut(r.RequestPut, before)
		case *pb.RequestOp_RequestTxn:
			err = m.checkTxn(r.RequestTxn, c.nested[i], before)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// checkTxnRange is etcd's check of a txn's range revision (txn.checkRange):
// unlike a plain Range it compares a negative revision with the compacted
// one, which etcd holds as -1 until the first compaction.
func (m *model) checkTxnRange(rev int64) error {
	first := m.compacted
	if first == 0 {
		first = -1
	}
	switch {
	case rev == 0:
		return nil
	case rev > m.current:
		return mvcc.ErrFutureRev
	case rev < first:
		return mvcc.ErrCompacted
	}
	return nil
}

// execTxn executes the chosen branch in order, each operation seeing the
// writes before it. A nested txn's answer has an empty header, as etcd's.
func (w *write) execTxn(t *pb.TxnRequest, c *choice) *pb.TxnResponse {
	ops := branchOps(t, c.succeeded)
	resp := &pb.TxnResponse{Succeeded: c.succeeded, Header: &pb.ResponseHeader{}, Responses: make([]*pb.ResponseOp, len(ops))}
	for i, op := range ops {
		var out pb.ResponseOp
		switch r := op.Request.(type) {
		case *pb.RequestOp_RequestRange:
			out.Response = &pb.ResponseOp_ResponseRange{ResponseRange: w.rangeReq(r.RequestRange)}
		case *pb.RequestOp_RequestPut:
			out.Response = &pb.ResponseOp_ResponsePut{ResponsePut: w.putReq(r.RequestPut)}
		case *pb.RequestOp_RequestDeleteRange:
			out.Response = &pb.ResponseOp_ResponseDeleteRange{ResponseDeleteRange: w.deleteReq(r.RequestDeleteRange)}
		case *pb.RequestOp_RequestTxn:
			out.Response = &pb.ResponseOp_ResponseTxn{ResponseTxn: w.execTxn(r.RequestTxn, c.nested[i])}
		}
		resp.Responses[i] = &out
	}
	return resp
}

// compares is etcd's rule: every compare must hold. Over a range, every
// key of it must satisfy the compare; on no key a value compare fails and
// the other targets compare the zero key-value.
func compares(cs []*pb.Compare, st map[string]*mvccpb.KeyValue) bool {
	for _, c := range cs {
		keys := keysIn(st, c.Key, c.RangeEnd)
		if len(keys) == 0 {
			if c.Target == pb.Compare_VALUE || !compareKV(c, &mvccpb.KeyValue{}) {
				return false
			}
			continue
		}
		for _, k := range keys {
			if !compareKV(c, st[k]) {
				return false
			}
		}
	}
	return true
}

func compareKV(c *pb.Compare, kv *mvccpb.KeyValue) bool {
	var d int
	switch c.Target {
	case pb.Compare_VALUE:
		d = bytes.Compare(kv.Value, c.GetValue())
	case pb.Compare_VERSION:
		d = cmp.Compare(kv.Version, c.GetVersion())
	case pb.Compare_CREATE:
		d = cmp.Compare(kv.CreateRevision, c.GetCreateRevision())
	case pb.Compare_MOD:
		d = cmp.Compare(kv.ModRevision, c.GetModRevision())
	case pb.Compare_LEASE:
		d = cmp.Compare(kv.Lease, c.GetLease())
	}
	switch c.Result {
	case pb.Compare_EQUAL:
		return d == 0
	case pb.Compare_NOT_EQUAL:
		return d != 0
	case pb.Compare_GREATER:
		return d > 0
	case pb.Compare_LESS:
		return d < 0
	}
	return true
}
