package sqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/kite-db/kite/pkg/mvcc"
)

// TestOpenReadKeepsCompactedRows: a read that began before a compaction
// committed still answers from its snapshot, whose rows the compaction
// removed from the log after it began. The key index must keep them for
// it (keyindex.go, queuePrune), and drop them once it ends.
func TestOpenReadKeepsCompactedRows(t *testing.T) {
	ctx := context.Background()
	b := mustOpen(t, filepath.Join(t.TempDir(), "kite.db"))
	write := func(f func(tx mvcc.WriteTx) error) {
		t.Helper()
		tx, err := b.BeginWrite(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := f(tx); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	// Revisions 1-5 put a@1..a@5, revision 6 deletes a.
	for rev := int64(1); rev <= 5; rev++ {
		write(func(tx mvcc.WriteTx) error {
			kv := &mvccpb.KeyValue{Key: []byte("a"), Value: []byte(fmt.Sprint(rev)),
				CreateRevision: 1, ModRevision: rev, Version: rev}
			if err := tx.Put(ctx, kv, 0); err != nil {
				return err
			}
			return tx.SetRevisions(ctx, rev, 0)
		})
	}
	write(func(tx mvcc.WriteTx) error {
		if err := tx.Delete(ctx, []byte("a"), 6, 0); err != nil {
			return err
		}
		return tx.SetRevisions(ctx, 6, 0)
	})

	old, err := b.BeginRead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	write(func(tx mvcc.WriteTx) error {
		if err := tx.SetRevisions(ctx, 6, 6); err != nil {
			return err
		}
		n, err := tx.CompactBatch(ctx, 6, 1, 6)
		if err == nil && n != 6 {
			err = fmt.Errorf("CompactBatch removed %d rows, want 6", n)
		}
		return err
	})
	for rev := int64(1); rev <= 5; rev++ {
		kvs, err := old.Range(ctx, []byte("a"), nil, rev, 0, false)
		if err != nil || len(kvs) != 1 || string(kvs[0].Value) != fmt.Sprint(rev) {
			t.Fatalf("old snapshot, Range(a) at %d = %v, %v; want a@%d", rev, kvs, err, rev)
		}
	}
	changes, err := old.Changes(ctx, 3, 6, 0, true)
	if err != nil || len(changes) != 4 || string(changes[3].PrevKV.GetValue()) != "5" {
		t.Fatalf("old snapshot, Changes(3, 6) = %v, %v; want 4 changes, the last replacing a@5", changes, err)
	}
	if err := old.Rollback(); err != nil {
		t.Fatal(err)
	}

	// A new snapshot sees the log as compacted, and the index has let
	// the rows go: the next write finds the key new.
	tx, err := b.BeginRead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if changes, err := tx.Changes(ctx, 1, 6, 0, true); err != nil || len(changes) != 0 {
		t.Fatalf("Changes(1, 6) after the compaction = %v, %v; want none", changes, err)
	}
	if n, err := tx.Count(ctx, []byte{0}, []byte{0}, 6); err != nil || n != 0 {
		t.Fatalf("Count at 6 = %d, %v; want 0", n, err)
	}
}

// TestRolledBackRowsLeaveTheIndex: rows of a write transaction that did
// not commit are not found by a later one that reuses their revision.
func TestRolledBackRowsLeaveTheIndex(t *testing.T) {
	ctx := context.Background()
	b := mustOpen(t, filepath.Join(t.TempDir(), "kite.db"))
	put := func(key string, rev int64, commit bool) {
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
		if commit {
			err = tx.Commit()
		} else {
			err = tx.Rollback()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	put("a", 1, true)
	put("b", 2, false)
	put("c", 2, true)
	put("d", 3, true)
	tx, err := b.BeginRead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	kvs, err := tx.Range(ctx, []byte{0}, []byte{0}, 2, 0, true)
	if err != nil || len(kvs) != 2 || string(kvs[0].Key) != "a" || string(kvs[1].Key) != "c" {
		t.Fatalf("Range at 2 = %v, %v; want a and c", kvs, err)
	}
	changes, err := tx.Changes(ctx, 2, 2, 0, true)
	if err != nil || len(changes) != 1 || string(changes[0].KV.Key) != "c" || changes[0].PrevKV != nil {
		t.Fatalf("Changes(2, 2) = %v, %v; want the put of c, with no previous row", changes, err)
	}
}

// TestRewriteRolledBackRestoresTheIndex: a transaction that compacts
// every row and writes the log again from revision 1 (kite copy --force)
// takes the removed rows out of the key index at once; if it rolls back,
// the index must answer from the log as it was.
func TestRewriteRolledBackRestoresTheIndex(t *testing.T) {
	ctx := context.Background()
	b := mustOpen(t, filepath.Join(t.TempDir(), "kite.db"))
	tx, err := b.BeginWrite(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for rev := int64(1); rev <= 3; rev++ {
		kv := &mvccpb.KeyValue{Key: []byte("a"), Value: []byte(fmt.Sprint(rev)), CreateRevision: 1, ModRevision: rev, Version: rev}
		if err := tx.Put(ctx, kv, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Delete(ctx, []byte("a"), 4, 0); err != nil {
		t.Fatal(err)
	}
	if err := tx.SetRevisions(ctx, 4, 0); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}

	tx, err = b.BeginWrite(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := tx.CompactBatch(ctx, 4, 0, 4); err != nil || n != 4 {
		t.Fatalf("CompactBatch = %d, %v; want 4 rows", n, err)
	}
	if err := tx.SetRevisions(ctx, 0, 0); err != nil {
		t.Fatal(err)
	}
	kv := &mvccpb.KeyValue{Key: []byte("b"), Value: []byte("b"), CreateRevision: 1, ModRevision: 1, Version: 1}
	if err := tx.Put(ctx, kv, 0); err != nil {
		t.Fatal(err)
	}
	if kvs, err := tx.Range(ctx, []byte{0}, []byte{0}, 1, 0, false); err != nil || len(kvs) != 1 || string(kvs[0].Key) != "b" {
		t.Fatalf("inside the rewrite, Range at 1 = %v, %v; want b alone", kvs, err)
	}
	if err := tx.SetRevisions(ctx, 1, 0); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}

	rtx, err := b.BeginRead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer rtx.Rollback()
	for rev := int64(1); rev <= 3; rev++ {
		kvs, err := rtx.Range(ctx, []byte{0}, []byte{0}, rev, 0, false)
		if err != nil || len(kvs) != 1 || string(kvs[0].Key) != "a" || string(kvs[0].Value) != fmt.Sprint(rev) {
			t.Fatalf("after the rollback, Range at %d = %v, %v; want a@%d alone", rev, kvs, err, rev)
		}
	}
}
