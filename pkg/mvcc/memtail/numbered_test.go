package memtail_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/kite-db/kite/pkg/drivers/sqlite"
	"github.com/kite-db/kite/pkg/mvcc"
	"github.com/kite-db/kite/pkg/mvcc/memtail"
)

// TestNumbered: behind a caller's log (raftsql's WAL) every batch of that
// log comes with its index, and a batch without one (a maintenance step,
// a Store's bootstrap) is outside it. Such a batch must take no index,
// or the next entry of the log would be refused as already applied; it
// goes to the base at once, after the tail, and is there for reads and
// across a reopen, while the numbered batches stay in the tail until a
// flush. Sync makes everything durable in the base.
func TestNumbered(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "kite.db")
	open := func() (*memtail.Backend, *sqlite.Backend) {
		base, err := sqlite.Open(ctx, path, sqlite.Options{NoCommitSync: true})
		if err != nil {
			t.Fatal(err)
		}
		b, err := memtail.Open(ctx, base, memtail.Options{Numbered: true, FlushInterval: time.Hour, FlushOps: 1 << 30})
		if err != nil {
			t.Fatal(err)
		}
		return b, base
	}
	put := func(b mvcc.Backend, index uint64, key string, rev int64) {
		t.Helper()
		tx, err := b.BeginWrite(ctx)
		if err != nil {
			t.Fatal(err)
		}
		kv := &mvccpb.KeyValue{Key: []byte(key), Value: []byte(key), CreateRevision: rev, ModRevision: rev, Version: 1}
		if err := tx.Put(ctx, kv, 0); err != nil {
			t.Fatal(err)
		}
		if err := tx.SetRevisions(ctx, rev, 0); err != nil {
			t.Fatal(err)
		}
		if index != 0 {
			if err := tx.(mvcc.AppliedIndexTx).SetAppliedIndex(ctx, index); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			t.Fatalf("commit of the put of %s (index %d): %v", key, index, err)
		}
	}
	applied := func(b interface {
		AppliedIndex(context.Context) (uint64, error)
	}) uint64 {
		t.Helper()
		i, err := b.AppliedIndex(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return i
	}
	get := func(b mvcc.Backend, key string) *mvccpb.KeyValue {
		t.Helper()
		tx, err := b.BeginRead(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		kv, err := tx.Get(ctx, []byte(key))
		if err != nil {
			t.Fatal(err)
		}
		return kv
	}

	b, base := open()
	put(b, 0, "bootstrap", 2) // outside the log
	put(b, 5, "a", 3)
	put(b, 0, "maintenance", 4) // outside the log, after a numbered batch
	put(b, 6, "b", 5)           // refused if the unnumbered batch took 6
	if got := applied(b); got != 6 {
		t.Errorf("AppliedIndex = %d, want 6", got)
	}
	// The unnumbered batch flushed the tail before it: "a" is in the base,
	// "b" not yet.
	if got := applied(base); got != 5 {
		t.Errorf("the base's applied index = %d, want 5", got)
	}
	for _, k := range []string{"bootstrap", "a", "maintenance", "b"} {
		if get(b, k) == nil {
			t.Errorf("%s not read back", k)
		}
	}
	if get(base, "b") != nil {
		t.Error("b in the base before a flush")
	}
	if err := b.Sync(); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	if got := applied(base); got != 6 {
		t.Errorf("after Sync the base's applied index = %d, want 6", got)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b, _ = open()
	defer b.Close()
	for _, k := range []string{"bootstrap", "a", "maintenance", "b"} {
		if get(b, k) == nil {
			t.Errorf("after a reopen %s not read back", k)
		}
	}
	put(b, 7, "c", 6)
	if got := applied(b); got != 7 {
		t.Errorf("after a reopen AppliedIndex = %d, want 7", got)
	}
}
