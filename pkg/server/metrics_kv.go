package server

import (
	"context"
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kite-db/kite/pkg/mvcc"
)

// kvMetrics are etcd's etcd_mvcc_{range,put,delete,txn}_total and, for a
// member that is not a raft member, the proposal counters of the write
// path. etcd counts its mvcc operations where its store runs them, one
// mvcc transaction at a time; kite's store computes the same operations
// inside the database, so they are counted here from the request and its
// answer with etcd's rules: every range, put and delete an mvcc
// transaction runs (compares and prev_kv reads are ranges), and txn_total
// for each mvcc transaction that ran more than one of them.
type kvMetrics struct {
	ranges, puts, deletes, txns prometheus.Counter

	// proposals counts the writes as a member without raft reports its
	// proposals (singleMember.proposals).
	proposals *proposalCounts
}

func newKVMetrics(reg prometheus.Registerer, proposals *proposalCounts) *kvMetrics {
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	m := &kvMetrics{
		ranges:    c("etcd_mvcc_range_total", "Total number of ranges seen by this member."),
		puts:      c("etcd_mvcc_put_total", "Total number of puts seen by this member."),
		deletes:   c("etcd_mvcc_delete_total", "Total number of deletes seen by this member."),
		txns:      c("etcd_mvcc_txn_total", "Total number of txns seen by this member."),
		proposals: proposals,
	}
	reg.MustRegister(m.ranges, m.puts, m.deletes, m.txns)
	return m
}

// opCount is what one mvcc transaction of etcd ran.
type opCount struct{ ranges, puts, deletes int }

// add counts one mvcc transaction. A nil kvMetrics (a kvServer built
// without a registry, as in tests) counts nothing.
func (m *kvMetrics) add(c opCount) {
	if m == nil {
		return
	}
	m.ranges.Add(float64(c.ranges))
	m.puts.Add(float64(c.puts))
	m.deletes.Add(float64(c.deletes))
	if c.ranges+c.puts+c.deletes > 1 {
		m.txns.Inc()
	}
}

func (m *kvMetrics) rangeDone() { m.add(opCount{ranges: 1}) }

func (m *kvMetrics) putDone(r *pb.PutRequest) { m.add(putOps(r)) }

func (m *kvMetrics) deleteDone(r *pb.DeleteRangeRequest) { m.add(deleteOps(r)) }

// txnDone counts a txn as etcd runs it: a write txn evaluates its compares
// (and checks its puts' previous values) in a read transaction of its
// own, then runs the chosen branch in the write transaction; a read-only
// txn does both in one. A failed compare stops the evaluation in etcd;
// which one failed is not in the answer, so every compare is counted.
func (m *kvMetrics) txnDone(r *pb.TxnRequest, resp *pb.TxnResponse) {
	var check, run opCount
	txnOps(r, resp, &check, &run)
	if mvcc.IsReadOnlyTxn(r) {
		m.add(opCount{check.ranges + run.ranges, run.puts, run.deletes})
		return
	}
	m.add(check)
	m.add(run)
}

func putOps(r *pb.PutRequest) opCount {
	c := opCount{puts: 1}
	if putReadsPrev(r) {
		c.ranges++
	}
	return c
}

func putReadsPrev(r *pb.PutRequest) bool { return r.PrevKv || r.IgnoreValue || r.IgnoreLease }

func deleteOps(r *pb.DeleteRangeRequest) opCount {
	c := opCount{deletes: 1}
	if r.PrevKv {
		c.ranges++
	}
	return c
}

// txnOps adds the compare phase of r (and of the txns nested in its
// chosen branch) to check and its operations to run.
func txnOps(r *pb.TxnRequest, resp *pb.TxnResponse, check, run *opCount) {
	check.ranges += len(r.Compare)
	branch := r.Failure
	if resp.GetSucceeded() {
		branch = r.Success
	}
	for i, op := range branch {
		switch req := op.Request.(type) {
		case *pb.RequestOp_RequestRange:
			run.ranges++
		case *pb.RequestOp_RequestPut:
			c := putOps(req.RequestPut)
			run.puts += c.puts
			run.ranges += c.ranges
			if putReadsPrev(req.RequestPut) {
				check.ranges++
			}
		case *pb.RequestOp_RequestDeleteRange:
			c := deleteOps(req.RequestDeleteRange)
			run.deletes += c.deletes
			run.ranges += c.ranges
		case *pb.RequestOp_RequestTxn:
			var nested *pb.TxnResponse
			if rs := resp.GetResponses(); i < len(rs) {
				nested = rs[i].GetResponseTxn()
			}
			txnOps(req.RequestTxn, nested, check, run)
		}
	}
}

// write tracks one write as a proposal (reported by a single member); the
// returned func ends it with the write's error.
func (m *kvMetrics) write() func(error) {
	if m == nil {
		return func(error) {}
	}
	m.proposals.pending.Add(1)
	return func(err error) {
		m.proposals.pending.Add(-1)
		if proposalFailed(err) {
			m.proposals.failed.Add(1)
		}
	}
}

// proposalFailed tells a write that did not complete (etcd's failed
// proposal: timed out, stopped, storage unavailable) from one that was
// answered with an error about the request (compacted, lease not found,
// no space), which etcd applies and does not count.
func proposalFailed(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	switch status.Code(toGRPCError(err)) {
	case codes.Unavailable, codes.Internal, codes.Unknown, codes.DeadlineExceeded, codes.Canceled:
		return true
	}
	return false
}
