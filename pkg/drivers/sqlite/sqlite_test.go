package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/kite-db/kite/pkg/drivers/sqlite"
	"github.com/kite-db/kite/pkg/mvcc"
	"github.com/kite-db/kite/pkg/mvcc/backendtest"
)

// mustOpen opens the database file at path and closes it when t ends.
func mustOpen(t testing.TB, path string) *sqlite.Backend {
	t.Helper()
	b, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		t.Fatalf("Open(%q): %v", path, err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

// fileOpeners open Backends on fresh files, and reopen one on its file,
// for the suites that restart their storage.
func fileOpeners() (open func(t *testing.T) mvcc.Backend, reopen func(t *testing.T, b mvcc.Backend) mvcc.Backend) {
	open = func(t *testing.T) mvcc.Backend {
		return mustOpen(t, filepath.Join(t.TempDir(), "kite.db"))
	}
	reopen = func(t *testing.T, b mvcc.Backend) mvcc.Backend {
		path := b.(*sqlite.Backend).Path()
		if err := b.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		return mustOpen(t, path)
	}
	return open, reopen
}

func TestConformance(t *testing.T) {
	open, reopen := fileOpeners()
	restore := func(t *testing.T, snapshot io.Reader) mvcc.Backend {
		path := backendtest.SnapshotFile(t, snapshot)
		return mustOpen(t, path)
	}
	backendtest.Run(t, open, backendtest.WithReopen(reopen), backendtest.WithRestore(restore))
}

// TestFailedWriteLeavesNoTrace: after a statement fails (here: cancelled),
// the transaction refuses to commit anything, even writes that succeeded
// before it, and the writer is free for the next transaction.
func TestFailedWriteLeavesNoTrace(t *testing.T) {
	b := mustOpen(t, filepath.Join(t.TempDir(), "kite.db"))
	ctx := context.Background()
	tx, err := b.BeginWrite(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Put(ctx, &mvccpb.KeyValue{Key: []byte("a"), ModRevision: 1, CreateRevision: 1, Version: 1}, 0); err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := tx.Put(cancelled, &mvccpb.KeyValue{Key: []byte("b"), ModRevision: 1, CreateRevision: 1, Version: 1}, 1); err == nil {
		t.Fatal("Put with a cancelled context succeeded")
	}
	if err := tx.SetRevisions(ctx, 1, 0); err == nil {
		t.Error("SetRevisions after a failed statement succeeded")
	}
	if err := tx.Commit(); err == nil {
		t.Error("Commit after a failed statement succeeded")
	}
	rtx, err := b.BeginRead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer rtx.Rollback()
	if cur, _, err := rtx.Revisions(ctx); err != nil || cur != 0 {
		t.Errorf("Revisions = %d, %v; want 0", cur, err)
	}
	if kv, err := rtx.Get(ctx, []byte("a")); err != nil || kv != nil {
		t.Errorf("Get(a) = %v, %v; want nothing", kv, err)
	}
	tx, err = b.BeginWrite(ctx)
	if err != nil {
		t.Fatalf("BeginWrite after failed commit: %v", err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
}

// TestBeginWriteWaitHonoursContext: a second writer waits for the first
// and gives up when its context ends.
func TestBeginWriteWaitHonoursContext(t *testing.T) {
	b := mustOpen(t, filepath.Join(t.TempDir(), "kite.db"))
	first, err := b.BeginWrite(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := b.BeginWrite(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("second BeginWrite = %v, want deadline exceeded", err)
	}
	if err := first.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.BeginWrite(context.Background()); !errors.Is(err, mvcc.ErrClosed) {
		t.Errorf("BeginWrite after Close = %v, want ErrClosed", err)
	}
	if _, err := b.BeginRead(context.Background()); !errors.Is(err, mvcc.ErrClosed) {
		t.Errorf("BeginRead after Close = %v, want ErrClosed", err)
	}
}

// TestDefragmentShrinksFile: after most data is compacted away, Defragment
// gives the pages back.
func TestDefragmentShrinksFile(t *testing.T) {
	b := mustOpen(t, filepath.Join(t.TempDir(), "kite.db"))
	ctx := context.Background()
	value := make([]byte, 4096)
	for rev := int64(1); rev <= 2; rev++ {
		tx, err := b.BeginWrite(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 200 {
			kv := &mvccpb.KeyValue{Key: fmt.Appendf(nil, "k%03d", i), CreateRevision: 1, ModRevision: rev, Version: rev, Value: value}
			if rev == 2 {
				kv.Value = nil
			}
			if err := tx.Put(ctx, kv, int64(i)); err != nil {
				t.Fatal(err)
			}
		}
		if rev == 2 {
			if _, err := tx.CompactBatch(ctx, 2, 1, 2); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.SetRevisions(ctx, rev, rev-1); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	before, inUse, err := b.Size(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if inUse >= before {
		t.Errorf("before defragment: in use %d of %d, want free pages", inUse, before)
	}
	if err := b.Defragment(ctx); err != nil {
		t.Fatal(err)
	}
	after, _, err := b.Size(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after >= before {
		t.Errorf("size after defragment %d, want below %d", after, before)
	}
}

// TestAuthStateIsBlob: meta.value is declared INTEGER, yet the auth state
// is kept there as given, a BLOB, even when its bytes read as a number (as
// TEXT they would be converted to INTEGER affinity's 123); the revisions in
// the other rows of the WITHOUT ROWID table are unaffected.
func TestAuthStateIsBlob(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kite.db")
	b, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, state := range [][]byte{[]byte("123"), []byte("12.5"), {}, []byte("0123")} {
		tx, err := b.BeginWrite(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.PutAuthState(ctx, state); err != nil {
			t.Fatalf("PutAuthState(%q): %v", state, err)
		}
		if err := tx.SetRevisions(ctx, 3, 1); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		db, err := sql.Open("sqlite", path)
		if err != nil {
			t.Fatal(err)
		}
		var typ string
		var got []byte
		err = db.QueryRow(`SELECT typeof(value), value FROM meta WHERE name = 'auth'`).Scan(&typ, &got)
		db.Close()
		if err != nil {
			t.Fatal(err)
		}
		if typ != "blob" || string(got) != string(state) {
			t.Errorf("meta 'auth' after PutAuthState(%q) = %s %q, want blob %q", state, typ, got, state)
		}
		rtx, err := b.BeginRead(ctx)
		if err != nil {
			t.Fatal(err)
		}
		cur, comp, _ := rtx.Revisions(ctx)
		st, err := rtx.AuthState(ctx)
		rtx.Rollback()
		if err != nil || st == nil || string(st) != string(state) || cur != 3 || comp != 1 {
			t.Errorf("after PutAuthState(%q): AuthState %q, %v; revisions %d, %d; want %q, 3, 1",
				state, st, err, cur, comp, state)
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
}
