package raftsql

import (
	"context"
	"testing"

	"github.com/kite-db/kite/pkg/mvcc"
	"github.com/kite-db/kite/pkg/mvcc/storetest"
)

// TestStoreModel runs a Store over a single-member cluster against the
// reference model: every write is proposed, committed by raft and applied
// back through Store.Apply, and every reopen restarts the member from its
// WAL and SQLite file.
func TestStoreModel(t *testing.T) {
	open := func(t *testing.T) mvcc.Backend {
		n, err := Open(context.Background(), oneMember(t.TempDir()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		return n
	}
	reopen := func(t *testing.T, b mvcc.Backend) mvcc.Backend {
		dir := b.(*Node).cfg.DataDir
		if err := b.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		n, err := Open(context.Background(), oneMember(dir))
		if err != nil {
			t.Fatalf("reopen: %v", err)
		}
		t.Cleanup(func() { n.Close() })
		return n
	}
	storetest.Run(t, open, storetest.WithReopen(reopen))
}
