package memtail_test

import (
	"context"
	"io"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/kite-db/kite/pkg/drivers/sqlite"
	"github.com/kite-db/kite/pkg/mvcc"
	"github.com/kite-db/kite/pkg/mvcc/backendtest"
	"github.com/kite-db/kite/pkg/mvcc/memtail"
	"github.com/kite-db/kite/pkg/mvcc/storetest"
)

// policies are the flush points the suites run with: reads then merge a
// tail that holds everything, that is flushed after every commit, or
// that is flushed every few ops by the flusher goroutine, at moments the
// test does not choose.
var policies = []struct {
	name string
	opts memtail.Options
}{
	{"NeverFlushed", memtail.Options{FlushInterval: time.Hour, FlushOps: 1 << 30}},
	{"FlushedEachCommit", memtail.Options{FlushInterval: time.Hour, FlushOps: 1}},
	{"FlushedAnytime", memtail.Options{FlushInterval: time.Millisecond, FlushOps: 3}},
}

// opener opens memtail Backends over SQLite files and remembers each one's
// path, so that the suite can reopen and restore them.
type opener struct {
	opts  memtail.Options
	mu    sync.Mutex
	paths map[mvcc.Backend]string
}

func (o *opener) at(t *testing.T, path string) mvcc.Backend {
	t.Helper()
	ctx := context.Background()
	base, err := sqlite.Open(ctx, path, sqlite.Options{NoCommitSync: true})
	if err != nil {
		t.Fatalf("sqlite.Open(%q): %v", path, err)
	}
	opts := o.opts
	opts.LogDir = path + ".log"
	b, err := memtail.Open(ctx, base, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	o.mu.Lock()
	o.paths[b] = path
	o.mu.Unlock()
	return b
}

// open opens a Backend on a fresh file.
func (o *opener) open(t *testing.T) mvcc.Backend {
	return o.at(t, filepath.Join(t.TempDir(), "kite.db"))
}

// reopen closes b and opens its file again.
func (o *opener) reopen(t *testing.T, b mvcc.Backend) mvcc.Backend {
	path := o.path(b)
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	return o.at(t, path)
}

func (o *opener) path(b mvcc.Backend) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.paths[b]
}

func TestConformance(t *testing.T) {
	for _, p := range policies {
		t.Run(p.name, func(t *testing.T) {
			o := &opener{opts: p.opts, paths: map[mvcc.Backend]string{}}
			restore := func(t *testing.T, snapshot io.Reader) mvcc.Backend {
				path := backendtest.SnapshotFile(t, snapshot)
				return o.at(t, path)
			}
			backendtest.Run(t, o.open, backendtest.WithReopen(o.reopen), backendtest.WithRestore(restore))
		})
	}
}

// TestStoreModel runs a Store over memtail against storetest's reference
// model, at every flush policy, reopening (which replays nothing: Close
// flushes) at random points.
func TestStoreModel(t *testing.T) {
	for _, p := range policies {
		t.Run(p.name, func(t *testing.T) {
			o := &opener{opts: p.opts, paths: map[mvcc.Backend]string{}}
			storetest.Run(t, o.open, storetest.WithReopen(o.reopen))
		})
	}
}

// TestReadsAreCopies: a caller may change the rows a read returns (a
// keys-only answer drops values in place); the tail, which every read
// shares, must not change with them.
func TestReadsAreCopies(t *testing.T) {
	o := &opener{opts: policies[0].opts, paths: map[mvcc.Backend]string{}}
	b := o.at(t, filepath.Join(t.TempDir(), "kite.db"))
	ctx := context.Background()
	tx, err := b.BeginWrite(ctx)
	if err != nil {
		t.Fatal(err)
	}
	kv := &mvccpb.KeyValue{Key: []byte("a"), Value: []byte("1"), CreateRevision: 1, ModRevision: 1, Version: 1}
	if err := tx.Put(ctx, kv, 0); err != nil {
		t.Fatal(err)
	}
	if err := tx.SetRevisions(ctx, 1, 0); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	kv.Value = nil // the writer's own row, changed after its commit
	for range 2 {
		r, err := b.BeginRead(ctx)
		if err != nil {
			t.Fatal(err)
		}
		kvs, err := r.Range(ctx, []byte("a"), nil, 1, 0, false)
		if err != nil || len(kvs) != 1 || string(kvs[0].Value) != "1" {
			t.Fatalf("Range = %v, %v; want a=1", kvs, err)
		}
		kvs[0].Value = nil
		got, err := r.Get(ctx, []byte("a"))
		if err != nil || string(got.Value) != "1" {
			t.Fatalf("Get = %v, %v; want a=1", got, err)
		}
		got.Value = nil
		chs, err := r.Changes(ctx, 1, 1, 0, false)
		if err != nil || len(chs) != 1 || string(chs[0].KV.Value) != "1" {
			t.Fatalf("Changes = %v, %v; want a=1", chs, err)
		}
		chs[0].KV.Value = nil
		r.Rollback()
		latest, _, _, err := b.GetLatest(ctx, []byte("a"))
		if err != nil || string(latest.Value) != "1" {
			t.Fatalf("GetLatest = %v, %v; want a=1", latest, err)
		}
		latest.Value = nil
	}
}
