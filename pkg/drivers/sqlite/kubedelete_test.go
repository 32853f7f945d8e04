package sqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/kite-db/kite/pkg/drivers/sqlite"
	"github.com/kite-db/kite/pkg/mvcc"
)

// BenchmarkKubeDelete is kube-apiserver's delete of one object through a
// Store on SQLite: a txn that compares the key's mod revision and deletes
// it, or reads it when the compare fails. cpu-µs/op is the process's CPU
// per delete (the commit's fsync waits are not in it).
func BenchmarkKubeDelete(b *testing.B) {
	ctx := context.Background()
	be, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "kite.db"), sqlite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	s, err := mvcc.Open(ctx, be, mvcc.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		s.Close()
		be.Close()
	})
	key := func(i int) []byte { return fmt.Appendf(nil, "/registry/configmaps/bench/cm-%06d", i) }
	value := make([]byte, 1024)
	// Enough keys for every iteration, created in transactions of 100.
	n := b.N
	revs := make([]int64, n)
	for i := 0; i < n; i += 100 {
		txn := &pb.TxnRequest{}
		for j := i; j < min(i+100, n); j++ {
			txn.Success = append(txn.Success, &pb.RequestOp{Request: &pb.RequestOp_RequestPut{
				RequestPut: &pb.PutRequest{Key: key(j), Value: value}}})
		}
		resp, err := s.Txn(ctx, txn)
		if err != nil {
			b.Fatal(err)
		}
		for j := i; j < min(i+100, n); j++ {
			revs[j] = resp.Header.Revision
		}
	}
	// 16 clients, as kube-apiserver's deletes arrive together and share
	// commits.
	const clients = 16
	errc := make(chan error, clients)
	cpu0 := cpuTime(b)
	b.ResetTimer()
	for c := range clients {
		go func() { errc <- deleteEvery(ctx, s, key, revs, c, clients) }()
	}
	for range clients {
		if err := <-errc; err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((cpuTime(b)-cpu0).Microseconds())/float64(n), "cpu-µs/op")
}

// deleteEvery deletes, kube-apiserver's way, every clients-th key from
// first on.
func deleteEvery(ctx context.Context, s *mvcc.Store, key func(int) []byte, revs []int64, first, clients int) error {
	for i := first; i < len(revs); i += clients {
		k := key(i)
		resp, err := s.Txn(ctx, &pb.TxnRequest{
			Compare: []*pb.Compare{{Key: k, Target: pb.Compare_MOD, Result: pb.Compare_EQUAL,
				TargetUnion: &pb.Compare_ModRevision{ModRevision: revs[i]}}},
			Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: k}}}},
			Failure: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: k}}}},
		})
		if err != nil || !resp.Succeeded || resp.Responses[0].GetResponseDeleteRange().Deleted != 1 {
			return fmt.Errorf("delete %s: %v, %v", k, resp, err)
		}
	}
	return nil
}
