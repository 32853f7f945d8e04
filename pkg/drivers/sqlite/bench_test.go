package sqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/kite-db/kite/pkg/drivers/sqlite"
)

// fill writes revs revisions of perRev puts each, cycling over keys keys
// (so later revisions overwrite), and returns the current revision.
func fill(b *testing.B, be *sqlite.Backend, keys, revs, perRev int, value []byte) int64 {
	b.Helper()
	w := newRevisionWriter(be, keys, value, "/registry/pods/ns/pod-%06d")
	n := 0
	for range revs {
		w.commit(b, perRev, func(int) int { k := n % keys; n++; return k })
	}
	return w.rev
}

// revisionWriter writes revisions of puts to numbered keys, one
// transaction each, keeping every key's versions as the Store would.
type revisionWriter struct {
	be              *sqlite.Backend
	value           []byte
	keyFormat       string
	version, create []int64
	rev             int64
}

func newRevisionWriter(be *sqlite.Backend, keys int, value []byte, keyFormat string) *revisionWriter {
	return &revisionWriter{be: be, value: value, keyFormat: keyFormat,
		version: make([]int64, keys), create: make([]int64, keys)}
}

// commit writes the next revision: n puts, the sub-th to key pick(sub).
func (w *revisionWriter) commit(b *testing.B, n int, pick func(sub int) int) {
	b.Helper()
	ctx := context.Background()
	w.rev++
	tx, err := w.be.BeginWrite(ctx)
	if err != nil {
		b.Fatal(err)
	}
	for sub := range n {
		k := pick(sub)
		if w.version[k] == 0 {
			w.create[k] = w.rev
		}
		w.version[k]++
		kv := &mvccpb.KeyValue{Key: fmt.Appendf(nil, w.keyFormat, k),
			CreateRevision: w.create[k], ModRevision: w.rev, Version: w.version[k], Value: w.value}
		if err := tx.Put(ctx, kv, int64(sub)); err != nil {
			b.Fatal(err)
		}
	}
	if err := tx.SetRevisions(ctx, w.rev, 0); err != nil {
		b.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkPutBatch128 is one group commit of 128 puts, fsync included.
func BenchmarkPutBatch128(b *testing.B) {
	be := mustOpen(b, filepath.Join(b.TempDir(), "kite.db"))
	value := make([]byte, 512)
	b.ResetTimer()
	fill(b, be, 100_000, b.N, 128, value)
	b.ReportMetric(float64(b.N*128)/b.Elapsed().Seconds(), "puts/s")
}

func benchmarkRange(b *testing.B, historical, keysOnly bool) {
	be := mustOpen(b, filepath.Join(b.TempDir(), "kite.db"))
	// 5,000 keys, each written four times: history the historical read
	// must skip over.
	current := fill(b, be, 5_000, 160, 125, make([]byte, 512))
	rev := current
	if historical {
		rev = current - 40 // every key still has a newer version
	}
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		tx, err := be.BeginRead(ctx)
		if err != nil {
			b.Fatal(err)
		}
		kvs, err := tx.Range(ctx, []byte("/registry/pods/ns/pod-001000"), []byte{0}, rev, 500, keysOnly)
		if err != nil || len(kvs) != 500 {
			b.Fatalf("Range: %d rows, %v", len(kvs), err)
		}
		if err := tx.Rollback(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRangeCurrent500(b *testing.B)    { benchmarkRange(b, false, false) }
func BenchmarkRangeHistorical500(b *testing.B) { benchmarkRange(b, true, false) }
func BenchmarkRangeKeysOnly500(b *testing.B)   { benchmarkRange(b, false, true) }

// BenchmarkGetLatest is the latest single-key read, the commonest request.
func BenchmarkGetLatest(b *testing.B) {
	be := mustOpen(b, filepath.Join(b.TempDir(), "kite.db"))
	fill(b, be, 5_000, 40, 125, make([]byte, 1024))
	ctx := context.Background()
	i := 0
	b.ResetTimer()
	for b.Loop() {
		key := fmt.Appendf(nil, "/registry/pods/ns/pod-%06d", i%5_000)
		i++
		kv, _, _, err := be.GetLatest(ctx, key)
		if err != nil || kv == nil {
			b.Fatalf("GetLatest %s: %v, %v", key, kv, err)
		}
	}
}
