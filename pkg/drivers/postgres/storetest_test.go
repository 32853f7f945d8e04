package postgres_test

import (
	"sync"
	"testing"

	"github.com/kite-db/kite/pkg/drivers/postgres/pgtest"
	"github.com/kite-db/kite/pkg/mvcc"
	"github.com/kite-db/kite/pkg/mvcc/storetest"
)

// TestStoreModel runs the Store over a fresh Postgres database against the
// reference model, closing and reopening the database at random points.
func TestStoreModel(t *testing.T) {
	var mu sync.Mutex
	dsns := map[mvcc.Backend]string{}
	open := func(t *testing.T) mvcc.Backend {
		dsn := pgtest.NewDatabase(t)
		b := mustOpen(t, dsn)
		mu.Lock()
		dsns[b] = dsn
		mu.Unlock()
		return b
	}
	reopen := func(t *testing.T, b mvcc.Backend) mvcc.Backend {
		mu.Lock()
		dsn := dsns[b]
		mu.Unlock()
		if err := b.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		nb := mustOpen(t, dsn)
		mu.Lock()
		dsns[nb] = dsn
		mu.Unlock()
		return nb
	}
	storetest.Run(t, open, storetest.WithReopen(reopen))
}
