package postgres_test

import (
	"context"
	"io"
	"sync"
	"testing"

	"github.com/kite-db/kite/pkg/drivers/postgres"
	"github.com/kite-db/kite/pkg/drivers/postgres/pgtest"
	"github.com/kite-db/kite/pkg/drivers/sqlite"
	"github.com/kite-db/kite/pkg/mvcc"
	"github.com/kite-db/kite/pkg/mvcc/backendtest"
)

// mustOpen opens the database at dsn and closes it when t ends.
func mustOpen(t testing.TB, dsn string) *postgres.Backend {
	t.Helper()
	b, err := postgres.Open(context.Background(), dsn, postgres.Options{})
	if err != nil {
		t.Fatalf("Open(%s): %v", postgres.Redact(dsn), err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

// reopenable opens Backends on fresh databases, and reopens one on its
// database, for the suites that restart their storage.
func reopenable() (open func(t *testing.T) mvcc.Backend, reopen func(t *testing.T, b mvcc.Backend) mvcc.Backend) {
	var mu sync.Mutex
	dsns := map[mvcc.Backend]string{}
	open = func(t *testing.T) mvcc.Backend {
		dsn := pgtest.NewDatabase(t)
		b := mustOpen(t, dsn)
		mu.Lock()
		dsns[b] = dsn
		mu.Unlock()
		return b
	}
	reopen = func(t *testing.T, b mvcc.Backend) mvcc.Backend {
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
	return open, reopen
}

func TestConformance(t *testing.T) {
	open, reopen := reopenable()
	// A Postgres snapshot is a SQLite database file (snapshot.go).
	restore := func(t *testing.T, snapshot io.Reader) mvcc.Backend {
		path := backendtest.SnapshotFile(t, snapshot)
		b, err := sqlite.Open(context.Background(), path, sqlite.Options{})
		if err != nil {
			t.Fatalf("open restored snapshot: %v", err)
		}
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
	backendtest.Run(t, open, backendtest.WithReopen(reopen), backendtest.WithRestore(restore))
}
