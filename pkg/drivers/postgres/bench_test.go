package postgres_test

import (
	"context"
	"fmt"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/kite-db/kite/pkg/drivers/postgres/pgtest"
)

// BenchmarkWriteBatch commits transactions of 100 puts the way the Store
// applies a batch of requests: a Get of each key's previous row, then its
// Put, then the revisions. It reports log rows per second.
func BenchmarkWriteBatch(b *testing.B) {
	const puts = 100
	be := mustOpen(b, pgtest.NewDatabase(b))
	ctx := context.Background()
	value := make([]byte, 256)
	var rev int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tx, err := be.BeginWrite(ctx)
		if err != nil {
			b.Fatal(err)
		}
		for j := range puts {
			rev++
			key := fmt.Appendf(nil, "/registry/pods/default/pod-%05d", (i*puts+j)%5000)
			prev, err := tx.Get(ctx, key)
			if err != nil {
				b.Fatal(err)
			}
			kv := &mvccpb.KeyValue{Key: key, CreateRevision: rev, ModRevision: rev, Version: 1, Value: value}
			if prev != nil {
				kv.CreateRevision, kv.Version = prev.CreateRevision, prev.Version+1
			}
			if err := tx.Put(ctx, kv, 0); err != nil {
				b.Fatal(err)
			}
		}
		if err := tx.SetRevisions(ctx, rev, 0); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*puts)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkGetLatest measures the commonest read, one key with the
// revisions.
func BenchmarkGetLatest(b *testing.B) {
	be := mustOpen(b, pgtest.NewDatabase(b))
	commitNext(b, be, "k", nil)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		kv, _, _, err := be.GetLatest(ctx, []byte("k"))
		if err != nil || kv == nil {
			b.Fatal(kv, err)
		}
	}
}
