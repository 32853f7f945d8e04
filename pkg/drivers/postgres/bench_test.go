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

// BenchmarkRangePages reads a range of 10,000 keys with 1 KiB values in
// pages of 500, as kube-apiserver lists it: each Range asks for one row
// more than the page to learn whether there is a next page, whose first key
// the extra row is. live reads the current revision (kite_live); historical
// reads the revision before an unrelated later write (kite_log); keysonly
// is live without values. cpu-ns/op is this process's CPU time, without
// the server's.
func BenchmarkRangePages(b *testing.B) {
	const (
		keys     = 10_000
		pageSize = 500
	)
	be := mustOpen(b, pgtest.NewDatabase(b))
	ctx := context.Background()
	value := make([]byte, 1024)
	for i := range value {
		value[i] = byte(i)
	}
	var rev int64
	for i := 0; i < keys; i += 1000 {
		tx, err := be.BeginWrite(ctx)
		if err != nil {
			b.Fatal(err)
		}
		for j := i; j < i+1000; j++ {
			rev++
			key := fmt.Appendf(nil, "/registry/configmaps/default/cm-%05d", j)
			kv := &mvccpb.KeyValue{Key: key, CreateRevision: rev, ModRevision: rev, Version: 1, Value: value}
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
	listed := rev
	commitNext(b, be, "/registry/other", nil) // makes listed a historical revision

	from, end := []byte("/registry/configmaps/"), []byte("/registry/configmaps0")
	for _, bc := range []struct {
		name     string
		rev      int64
		keysOnly bool
	}{{"live", listed + 1, false}, {"historical", listed, false}, {"keysonly", listed + 1, true}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu0, cpuOK := processCPU()
			for b.Loop() {
				tx, err := be.BeginRead(ctx)
				if err != nil {
					b.Fatal(err)
				}
				n, key := 0, from
				for {
					kvs, err := tx.Range(ctx, key, end, bc.rev, pageSize+1, bc.keysOnly)
					if err != nil {
						b.Fatal(err)
					}
					if len(kvs) <= pageSize {
						n += len(kvs)
						break
					}
					n += pageSize
					key = kvs[pageSize].Key
				}
				if err := tx.Rollback(); err != nil {
					b.Fatal(err)
				}
				if n != keys {
					b.Fatalf("listed %d keys, want %d", n, keys)
				}
			}
			b.ReportMetric(float64(keys*b.N)/b.Elapsed().Seconds(), "keys/s")
			if cpu1, ok := processCPU(); ok && cpuOK {
				b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu-ns/op")
			}
		})
	}
}
