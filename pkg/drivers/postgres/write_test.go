package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/kite-db/kite/pkg/drivers/postgres"
	"github.com/kite-db/kite/pkg/drivers/postgres/pgtest"
	"github.com/kite-db/kite/pkg/mvcc"
)

// TestFailedCommitLeavesNoTrace: a statement that fails only when the
// pending writes reach the server (a row that already exists) fails the
// commit, nothing of the transaction remains, nobody is notified, and the
// writer is free for the next transaction.
func TestFailedCommitLeavesNoTrace(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	a, b := mustOpen(t, dsn), mustOpen(t, dsn)
	ctx := context.Background()
	rev := commitNext(t, a, "a", nil)
	expectNotice(t, "B", b.Notices(), mvcc.Notice{Rev: rev})

	tx, err := a.BeginWrite(ctx)
	if err != nil {
		t.Fatal(err)
	}
	good := &mvccpb.KeyValue{Key: []byte("b"), CreateRevision: 2, ModRevision: 2, Version: 1}
	dup := &mvccpb.KeyValue{Key: []byte("c"), CreateRevision: 1, ModRevision: 1, Version: 1} // (1, 0) exists
	for _, kv := range []*mvccpb.KeyValue{good, dup} {
		if err := tx.Put(ctx, kv, 0); err != nil {
			t.Fatalf("Put: %v", err)
		}
	}
	if err := tx.SetRevisions(ctx, 2, 0); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err == nil {
		t.Fatal("Commit of a duplicate row succeeded")
	}
	expectQuiet(t, "B", b.Notices(), 300*time.Millisecond)
	rtx, err := a.BeginRead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cur, _, _ := rtx.Revisions(ctx); cur != 1 {
		t.Errorf("current revision %d after failed commit, want 1", cur)
	}
	if kv, err := rtx.Get(ctx, []byte("b")); err != nil || kv != nil {
		t.Errorf("Get(b) = %v, %v; want nothing", kv, err)
	}
	if err := rtx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if rev := commitNext(t, a, "d", nil); rev != 2 {
		t.Errorf("next commit at revision %d, want 2", rev)
	}
}

// TestCancelledWritePoisons: a write call with a cancelled context fails
// the whole transaction.
func TestCancelledWritePoisons(t *testing.T) {
	b := mustOpen(t, pgtest.NewDatabase(t))
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
		t.Error("SetRevisions after a failed call succeeded")
	}
	if err := tx.Commit(); err == nil {
		t.Error("Commit after a failed call succeeded")
	}
	kv, cur, _, err := b.GetLatest(ctx, []byte("a"))
	if err != nil || kv != nil || cur != 0 {
		t.Errorf("GetLatest(a) = %v, %d, %v; want nothing at revision 0", kv, cur, err)
	}
}

// TestBeginWriteWaitHonoursContext: a second writer of the same Backend
// waits for the first and gives up when its context ends; after Close
// everything answers ErrClosed.
func TestBeginWriteWaitHonoursContext(t *testing.T) {
	b := mustOpen(t, pgtest.NewDatabase(t))
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

// TestWriterWaitsForOtherServer: a writer of another Backend waits on the
// revision row lock until the first commits, then sees its revision.
func TestWriterWaitsForOtherServer(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	a, b := mustOpen(t, dsn), mustOpen(t, dsn)
	ctx := context.Background()
	tx, err := a.BeginWrite(ctx)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := b.BeginWrite(short); err == nil {
		t.Fatal("BeginWrite on B succeeded while A holds the revision lock")
	}
	got := make(chan int64, 1)
	go func() {
		tx, err := b.BeginWrite(ctx)
		if err != nil {
			t.Error(err)
			got <- -1
			return
		}
		cur, _, _ := tx.Revisions(ctx)
		_ = tx.Rollback()
		got <- cur
	}()
	if err := tx.Put(ctx, &mvccpb.KeyValue{Key: []byte("a"), ModRevision: 1, CreateRevision: 1, Version: 1}, 0); err != nil {
		t.Fatal(err)
	}
	if err := tx.SetRevisions(ctx, 1, 0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if cur := <-got; cur != 1 {
		t.Errorf("B's writer saw current revision %d, want 1", cur)
	}
}

func TestRefusesNewerSchema(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	b := mustOpen(t, dsn)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `UPDATE kite_schema SET version = 99`); err != nil {
		t.Fatal(err)
	}
	_, err = postgres.Open(ctx, dsn, postgres.Options{})
	if err == nil || !strings.Contains(err.Error(), "schema version 99") {
		t.Fatalf("Open of a version 99 database = %v, want a schema version error", err)
	}
}

// TestLargeTransaction: a transaction with more rows than are kept pending
// at once (a lease revoke of many keys) sends them in parts and still reads
// its own writes.
func TestLargeTransaction(t *testing.T) {
	b := mustOpen(t, pgtest.NewDatabase(t))
	ctx := context.Background()
	const n = 10000
	all := [2][]byte{{}, {0}}
	for rev := int64(1); rev <= 2; rev++ {
		tx, err := b.BeginWrite(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			key := []byte(fmt.Sprintf("k%05d", i))
			if rev == 1 {
				err = tx.Put(ctx, &mvccpb.KeyValue{Key: key, CreateRevision: 1, ModRevision: 1, Version: 1, Lease: 5}, int64(i))
			} else {
				err = tx.Delete(ctx, key, rev, int64(i))
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		want := int64(n)
		if rev == 2 {
			want = 0
		}
		if got, err := tx.Count(ctx, all[0], all[1], rev); err != nil || got != want {
			t.Errorf("Count in transaction %d = %d, %v; want %d", rev, got, err, want)
		}
		if err := tx.SetRevisions(ctx, rev, 0); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	rtx, err := b.BeginRead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer rtx.Rollback()
	for rev, want := range map[int64]int64{1: n, 2: 0} {
		if got, err := rtx.Count(ctx, all[0], all[1], rev); err != nil || got != want {
			t.Errorf("Count at %d = %d, %v; want %d", rev, got, err, want)
		}
	}
	if changes, err := rtx.Changes(ctx, 1, 2, 0, true); err != nil || len(changes) != 2*n {
		t.Errorf("Changes = %d rows, %v; want %d", len(changes), err, 2*n)
	}
}
