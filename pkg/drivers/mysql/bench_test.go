package mysql_test

import (
	"context"
	"fmt"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/kite-db/kite/pkg/drivers/mysql/mysqltest"
	"github.com/kite-db/kite/pkg/mvcc"
)

// BenchmarkWriteBatch commits transactions of 100 puts the way the Store
// applies a batch of requests: a Get of each key's previous row, then its
// Put, then the revisions; prefetch begins each transaction with the
// batch's keys, as the Store does with a Prefetcher. It reports log rows
// per second.
func BenchmarkWriteBatch(b *testing.B) {
	for _, prefetch := range []bool{false, true} {
		b.Run(fmt.Sprintf("prefetch=%v", prefetch), func(b *testing.B) {
			const puts = 100
			be := mustOpen(b, mysqltest.NewDatabase(b))
			ctx := context.Background()
			value := make([]byte, 256)
			var rev int64
			keys := make([][]byte, puts)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for j := range puts {
					keys[j] = fmt.Appendf(nil, "/registry/pods/default/pod-%05d", (i*puts+j)%5000)
				}
				var tx mvcc.WriteTx
				var err error
				if prefetch {
					tx, err = be.BeginWritePrefetch(ctx, keys)
				} else {
					tx, err = be.BeginWrite(ctx)
				}
				if err != nil {
					b.Fatal(err)
				}
				for _, key := range keys {
					rev++
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
		})
	}
}

// BenchmarkGetLatest measures the commonest read, one key with the
// revisions.
func BenchmarkGetLatest(b *testing.B) {
	be := mustOpen(b, mysqltest.NewDatabase(b))
	if err := commitKV(b, be, 1, &mvccpb.KeyValue{Key: []byte("k"), Value: []byte("v")}); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		kv, _, _, err := be.GetLatest(ctx, []byte("k"))
		if err != nil || kv == nil {
			b.Fatal(kv, err)
		}
	}
}

// BenchmarkBeginRead measures a read transaction's begin and end, with
// one Get.
func BenchmarkBeginRead(b *testing.B) {
	be := mustOpen(b, mysqltest.NewDatabase(b))
	if err := commitKV(b, be, 1, &mvccpb.KeyValue{Key: []byte("k"), Value: []byte("v")}); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r, err := be.BeginRead(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if kv, err := r.Get(ctx, []byte("k")); err != nil || kv == nil {
			b.Fatal(kv, err)
		}
		if err := r.Rollback(); err != nil {
			b.Fatal(err)
		}
	}
}
