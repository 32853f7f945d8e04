//go:build kitetest

package sqlite

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// FailNextWrite fails the next Put inside its transaction, which then
// cannot commit; the write after it succeeds. The hook exists only with
// -tags kitetest (.ci/run runs this package's tests with it too).
func TestFailNextWrite(t *testing.T) {
	ctx := context.Background()
	b, err := Open(ctx, filepath.Join(t.TempDir(), "kite.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	fault := errors.New("injected")
	b.FailNextWrite(fault)
	put := func(rev int64) (error, error) {
		tx, err := b.BeginWrite(ctx)
		if err != nil {
			t.Fatal(err)
		}
		perr := tx.Put(ctx, &mvccpb.KeyValue{Key: []byte("k"), ModRevision: rev, CreateRevision: rev, Version: 1}, 0)
		if perr == nil {
			perr = tx.SetRevisions(ctx, rev, 0)
		}
		return perr, tx.Commit()
	}
	if perr, cerr := put(1); !errors.Is(perr, fault) || cerr == nil {
		t.Fatalf("faulted put: %v, commit %v; want the fault and a failed commit", perr, cerr)
	}
	if perr, cerr := put(1); perr != nil || cerr != nil {
		t.Fatalf("put after the fault: %v, commit %v", perr, cerr)
	}
}
