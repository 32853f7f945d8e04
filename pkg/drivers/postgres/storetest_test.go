package postgres_test

import (
	"testing"

	"github.com/kite-db/kite/pkg/mvcc/storetest"
)

// TestStoreModel runs the Store over a fresh Postgres database against the
// reference model, closing and reopening the database at random points.
func TestStoreModel(t *testing.T) {
	open, reopen := reopenable()
	storetest.Run(t, open, storetest.WithReopen(reopen))
}
