package server

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/kite-db/kite/pkg/mvcc"
)

// TestKVMetricsTxn checks etcd's counting of txns: a write txn's compare
// phase and its operations are two mvcc transactions, a read-only txn one,
// and nested txns add to their parent's.
func TestKVMetricsTxn(t *testing.T) {
	put := func(prev bool) *pb.RequestOp {
		return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("k"), PrevKv: prev}}}
	}
	get := &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("k")}}}
	cmp := &pb.Compare{Key: []byte("k")}
	for _, tt := range []struct {
		name                        string
		req                         *pb.TxnRequest
		resp                        *pb.TxnResponse
		ranges, puts, deletes, txns float64
	}{
		{"one compare, put", &pb.TxnRequest{Compare: []*pb.Compare{cmp}, Success: []*pb.RequestOp{put(false)}},
			&pb.TxnResponse{Succeeded: true}, 1, 1, 0, 0},
		{"two compares, put and get", &pb.TxnRequest{Compare: []*pb.Compare{cmp, cmp}, Success: []*pb.RequestOp{put(false), get}},
			&pb.TxnResponse{Succeeded: true}, 3, 1, 0, 2},
		{"failure branch", &pb.TxnRequest{Compare: []*pb.Compare{cmp}, Success: []*pb.RequestOp{put(false)}, Failure: []*pb.RequestOp{get}},
			&pb.TxnResponse{Succeeded: false}, 2, 0, 0, 0},
		{"put with prev_kv is checked then run", &pb.TxnRequest{Success: []*pb.RequestOp{put(true)}},
			&pb.TxnResponse{Succeeded: true}, 2, 1, 0, 1},
		{"nested", &pb.TxnRequest{Compare: []*pb.Compare{cmp}, Success: []*pb.RequestOp{
			{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Compare: []*pb.Compare{cmp}, Success: []*pb.RequestOp{put(false)}}}}}},
			&pb.TxnResponse{Succeeded: true, Responses: []*pb.ResponseOp{{Response: &pb.ResponseOp_ResponseTxn{ResponseTxn: &pb.TxnResponse{Succeeded: true}}}}},
			2, 1, 0, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := newKVMetrics(prometheus.NewRegistry(), &proposalCounts{})
			m.txnDone(tt.req, tt.resp)
			for name, c := range map[string]struct {
				got  prometheus.Counter
				want float64
			}{"ranges": {m.ranges, tt.ranges}, "puts": {m.puts, tt.puts}, "deletes": {m.deletes, tt.deletes}, "txns": {m.txns, tt.txns}} {
				if got := metricValue(c.got); got != c.want {
					t.Errorf("%s = %v, want %v", name, got, c.want)
				}
			}
		})
	}
}

// TestProposalFailed: only writes that did not complete count as failed
// proposals, not etcd's answers about the request.
func TestProposalFailed(t *testing.T) {
	m := newKVMetrics(prometheus.NewRegistry(), &proposalCounts{})
	m.write()(nil)
	m.write()(mvcc.ErrRequestTooLarge)
	if got := float64(m.proposals.failed.Load()); got != 0 {
		t.Fatalf("failed = %v after a success and a refused request", got)
	}
	m.write()(context.DeadlineExceeded)
	if got := float64(m.proposals.failed.Load()); got != 1 {
		t.Fatalf("failed = %v after a timeout, want 1", got)
	}
	if got := float64(m.proposals.pending.Load()); got != 0 {
		t.Fatalf("pending = %v with no write in flight", got)
	}
}

func metricValue(c prometheus.Metric) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue() + m.GetGauge().GetValue()
}
