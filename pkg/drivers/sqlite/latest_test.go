package sqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/kite-db/kite/pkg/mvcc"
)

// GetLatest asks the key index for the row before its statement takes its
// snapshot, so a commit in between must not make it answer a row of
// another revision than the one it reports: with one key put at odd
// revisions and deleted at even ones, a read at current c must see the
// key exactly when c is odd, at mod revision c.
func TestGetLatestAgreesWithItsRevision(t *testing.T) {
	ctx := context.Background()
	b := mustOpen(t, filepath.Join(t.TempDir(), "kite.db"))
	const revs = 2000
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for rev := int64(1); rev <= revs; rev++ {
			tx, err := b.BeginWrite(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			if rev%2 == 1 {
				err = tx.Put(ctx, &mvccpb.KeyValue{Key: []byte("k"), Value: []byte(fmt.Sprint(rev)),
					CreateRevision: rev, ModRevision: rev, Version: 1}, 0)
			} else {
				err = tx.Delete(ctx, []byte("k"), rev, 0)
			}
			if err == nil {
				err = tx.SetRevisions(ctx, rev, 0)
			}
			if err == nil {
				err = tx.Commit()
			}
			if err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				kv, current, _, err := b.GetLatest(ctx, []byte("k"))
				if err != nil {
					t.Error(err)
					return
				}
				switch {
				case current%2 == 0 && kv != nil:
					t.Errorf("GetLatest at %d: %v, want no key", current, kv)
					return
				case current%2 == 1 && (kv == nil || kv.ModRevision != current || string(kv.Value) != fmt.Sprint(current)):
					t.Errorf("GetLatest at %d: %v, want k@%d", current, kv, current)
					return
				}
				if current == revs {
					return
				}
			}
		}()
	}
	wg.Wait()
}

// A row that a transaction appended and rolled back leaves the key index
// before the next writer may append a row with the same id for another
// key: a read of the first key must not find the second's row.
func TestRolledBackIDReusedByAnotherKey(t *testing.T) {
	ctx := context.Background()
	b := mustOpen(t, filepath.Join(t.TempDir(), "kite.db"))
	put := func(key string, commit bool) {
		t.Helper()
		tx, err := b.BeginWrite(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Put(ctx, &mvccpb.KeyValue{Key: []byte(key), Value: []byte(key),
			CreateRevision: 1, ModRevision: 1, Version: 1}, 0); err != nil {
			t.Fatal(err)
		}
		if err := tx.SetRevisions(ctx, 1, 0); err != nil {
			t.Fatal(err)
		}
		if !commit {
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
			return
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	put("a", false)
	put("b", true)
	if kv, current, _, err := b.GetLatest(ctx, []byte("a")); err != nil || kv != nil || current != 1 {
		t.Fatalf("GetLatest(a) = %v at %d, %v; want no key at 1", kv, current, err)
	}
	kv, _, _, err := b.GetLatest(ctx, []byte("b"))
	if err != nil || kv == nil || string(kv.Value) != "b" {
		t.Fatalf("GetLatest(b) = %v, %v; want b", kv, err)
	}
	tx, err := b.BeginRead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	for _, f := range []func() (*mvccpb.KeyValue, error){
		func() (*mvccpb.KeyValue, error) { return tx.Get(ctx, []byte("a")) },
		func() (*mvccpb.KeyValue, error) { return tx.(mvcc.RowMetaReader).GetMeta(ctx, []byte("a")) },
	} {
		if kv, err := f(); err != nil || kv != nil {
			t.Fatalf("read of a = %v, %v; want no key", kv, err)
		}
	}
}
