package sqlite_test

import (
	"testing"

	"github.com/kite-db/kite/pkg/mvcc/storetest"
)

// TestStoreModel runs the Store over a SQLite file against the reference
// model, closing and reopening the file at random points.
func TestStoreModel(t *testing.T) {
	open, reopen := fileOpeners()
	storetest.Run(t, open, storetest.WithReopen(reopen))
}
