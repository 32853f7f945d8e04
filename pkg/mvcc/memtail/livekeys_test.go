package memtail_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/kite-db/kite/pkg/drivers/sqlite"
	"github.com/kite-db/kite/pkg/mvcc"
	"github.com/kite-db/kite/pkg/mvcc/memtail"
)

// countingBase counts the reads of the base begun while counting is on.
type countingBase struct {
	*sqlite.Backend
	counting atomic.Bool
	reads    atomic.Int64
}

func (c *countingBase) BeginRead(ctx context.Context) (mvcc.ReadTx, error) {
	if c.counting.Load() {
		c.reads.Add(1)
	}
	return c.Backend.BeginRead(ctx)
}

// BeginAppliedRead is the read memtail's reads and writes of the base
// begin with.
func (c *countingBase) BeginAppliedRead(ctx context.Context) (mvcc.AppliedReadTx, error) {
	if c.counting.Load() {
		c.reads.Add(1)
	}
	return c.Backend.BeginAppliedRead(ctx)
}

// TestWriterKnowsCreations checks that the writer answers a read of a key
// that is not live (a creation) without reading the base, also after a
// reopen, when what it knows comes from the base, in pages; that a key it
// cannot rule out is read from the base; and that deleted keys are known
// to be gone. The row cache is off, so only the live-key set can answer.
func TestWriterKnowsCreations(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "kite.db")
	var base *countingBase
	var b *memtail.Backend
	open := func() {
		t.Helper()
		sq, err := sqlite.Open(ctx, path, sqlite.Options{NoCommitSync: true})
		if err != nil {
			t.Fatal(err)
		}
		base = &countingBase{Backend: sq}
		b, err = memtail.Open(ctx, base, memtail.Options{LogDir: path + ".log", RowCacheBytes: -1})
		if err != nil {
			t.Fatal(err)
		}
	}
	open()
	defer func() { b.Close() }()

	// More keys than one page of the set's load.
	const n = 25000
	rev := int64(1)
	tx, err := b.BeginWrite(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		kv := &mvccpb.KeyValue{Key: fmt.Appendf(nil, "k%06d", i), Value: []byte("v"), CreateRevision: rev, ModRevision: rev, Version: 1}
		if err := tx.Put(ctx, kv, int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.SetRevisions(ctx, rev, 0); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}

	// get reads key in a write transaction and says how many reads of
	// the base it took.
	get := func(key string) (*mvccpb.KeyValue, int64) {
		t.Helper()
		tx, err := b.BeginWrite(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		base.reads.Store(0)
		base.counting.Store(true)
		defer base.counting.Store(false)
		kv, err := tx.Get(ctx, []byte(key))
		if err != nil {
			t.Fatal(err)
		}
		return kv, base.reads.Load()
	}
	expect := func(when, key string, live bool, maxReads int64) {
		t.Helper()
		kv, reads := get(key)
		if (kv != nil) != live {
			t.Fatalf("%s: Get(%s) = %v; want live %v", when, key, kv, live)
		}
		if reads > maxReads {
			t.Fatalf("%s: Get(%s) read the base %d times; want at most %d", when, key, reads, maxReads)
		}
	}
	flush := func() {
		t.Helper()
		if err := b.Defragment(ctx); err != nil { // flushes the tail
			t.Fatal(err)
		}
	}

	flush()
	expect("after a flush", "new", false, 0)
	expect("after a flush", "k000007", true, 1)
	if _, reads := get("k000008"); reads == 0 {
		t.Fatal("a live key the row cache does not hold was answered without the base: the test cannot see reads")
	}

	// A delete, flushed: the key is known to be gone.
	rev++
	tx, err = b.BeginWrite(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Delete(ctx, []byte("k000007"), rev, 0); err != nil {
		t.Fatal(err)
	}
	if err := tx.SetRevisions(ctx, rev, 0); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	flush()
	expect("after a flushed delete", "k000007", false, 0)

	for _, reopen := range []string{"reopened", "reopened again"} {
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		open()
		expect(reopen, "new", false, 0)
		expect(reopen, "k000007", false, 0)
		expect(reopen, "k000000", true, 1)
		expect(reopen, fmt.Sprintf("k%06d", n-1), true, 1) // in the load's last page
		expect(reopen, fmt.Sprintf("k%06d", n), false, 0)
	}
}
