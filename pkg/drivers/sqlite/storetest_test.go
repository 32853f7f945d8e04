package sqlite_test

import (
	"path/filepath"
	"testing"

	"github.com/kite-db/kite/pkg/drivers/sqlite"
	"github.com/kite-db/kite/pkg/mvcc"
	"github.com/kite-db/kite/pkg/mvcc/storetest"
)

// TestStoreModel runs the Store over a SQLite file against the reference
// model, closing and reopening the file at random points.
func TestStoreModel(t *testing.T) {
	open := func(t *testing.T) mvcc.Backend {
		return mustOpen(t, filepath.Join(t.TempDir(), "kite.db"))
	}
	reopen := func(t *testing.T, b mvcc.Backend) mvcc.Backend {
		path := b.(*sqlite.Backend).Path()
		if err := b.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		return mustOpen(t, path)
	}
	storetest.Run(t, open, storetest.WithReopen(reopen))
}
