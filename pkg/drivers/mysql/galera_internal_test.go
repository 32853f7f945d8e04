//go:build unix

package mysql

import (
	"context"
	"errors"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/kite-db/kite/pkg/drivers/mysql/mysqltest"
	"github.com/kite-db/kite/pkg/mvcc"
)

// TestGaleraAbortedWriter: a write transaction on one Galera node whose
// lock on the revision row is broken by a commit through another node (the
// applier aborts it, a brute-force abort) commits nothing of its batch and
// fails with mvcc.ErrConflict, so that the Store applies the batch again
// at the next revision (galera.go). The order is forced, not raced: node
// 0's writer holds the lock, node 1 commits the same revision, node 0
// applies that, and only then does node 0's writer send its batch.
//
// That is the abort of an idle writer, which MariaDB reports to its next
// statement (error 1213), so this test passes without galera.go's
// savepoint and read-back as well: they are for an abort that lands while
// a batch's statements run, which only load makes happen (TestGalera in
// test/ writes through three nodes at once and checks every acknowledged
// write and every watcher's events afterwards).
func TestGaleraAbortedWriter(t *testing.T) {
	ctx := context.Background()
	g := mysqltest.NewGalera(t, 2)
	g.Exec(t, 0, "CREATE DATABASE kite")
	open := func(i int) *Backend {
		t.Helper()
		b, err := Open(ctx, "mysql://"+g.DSN(i)+"kite", Options{})
		if err != nil {
			t.Fatalf("open a backend on node %d: %v", i, err)
		}
		t.Cleanup(func() { b.Close() })
		if !b.galera {
			t.Fatalf("node %d is not taken for a Galera node", i)
		}
		return b
	}
	b0, b1 := open(0), open(1)
	put := func(w mvcc.WriteTx, rev int64, key string) error {
		t.Helper()
		kv := &mvccpb.KeyValue{Key: []byte(key), Value: []byte("v"), CreateRevision: rev, ModRevision: rev, Version: 1}
		if err := w.Put(ctx, kv, 0); err != nil {
			return err
		}
		return w.SetRevisions(ctx, rev, 0)
	}

	w0, err := b0.BeginWrite(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w0.Rollback()
	rev, _, err := w0.Revisions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rev++

	// Node 1 does not see node 0's row lock and commits the revision.
	w1, err := b1.BeginWrite(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := put(w1, rev, "node1"); err != nil {
		t.Fatal(err)
	}
	if err := w1.Commit(); err != nil {
		t.Fatalf("commit through node 1 while node 0 holds the revision row: %v", err)
	}
	// A causal read on node 0 returns once node 0 applied that commit,
	// which aborted w0's transaction.
	if kv, current, _, err := b0.GetLatest(ctx, []byte("node1")); err != nil || kv == nil || current != rev {
		t.Fatalf("node 0 reads node 1's write: %v at %d, %v; want it at %d", kv, current, err, rev)
	}

	err = put(w0, rev, "node0")
	if err == nil {
		err = w0.Commit()
	}
	t.Logf("the aborted writer's batch: %v", err)
	if !errors.Is(err, mvcc.ErrConflict) {
		t.Errorf("a write transaction aborted by a commit through another node: %v, want mvcc.ErrConflict", err)
	}

	// Nothing of it is anywhere, and the next batch gets the next revision.
	for i, b := range []*Backend{b0, b1} {
		kv, current, _, err := b.GetLatest(ctx, []byte("node0"))
		if err != nil || kv != nil || current != rev {
			t.Errorf("node %d after the abort: node0 = %v at %d, %v; want nothing at %d", i, kv, current, err, rev)
		}
		kv, _, _, err = b.GetLatest(ctx, []byte("node1"))
		if err != nil || kv == nil || kv.ModRevision != rev {
			t.Errorf("node %d after the abort: node1 = %v, %v; want it at %d", i, kv, err, rev)
		}
	}
	w0, err = b0.BeginWrite(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if current, _, err := w0.Revisions(ctx); err != nil || current != rev {
		t.Fatalf("node 0's next write transaction begins at %d, %v; want %d", current, err, rev)
	}
	if err := put(w0, rev+1, "node0"); err != nil {
		t.Fatal(err)
	}
	if err := w0.Commit(); err != nil {
		t.Fatalf("node 0's batch applied again: %v", err)
	}
	if kv, current, _, err := b1.GetLatest(ctx, []byte("node0")); err != nil || kv == nil || current != rev+1 {
		t.Errorf("node 1 reads node 0's batch applied again: %v at %d, %v; want it at %d", kv, current, err, rev+1)
	}
}
