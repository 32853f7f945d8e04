package mysql_test

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/kite-db/kite/pkg/drivers/mysql"
	"github.com/kite-db/kite/pkg/drivers/mysql/mysqltest"
	"github.com/kite-db/kite/pkg/drivers/sqlite"
	"github.com/kite-db/kite/pkg/mvcc"
	"github.com/kite-db/kite/pkg/mvcc/backendtest"
)

// mustOpen opens the database at dsn and closes it when t ends.
func mustOpen(t testing.TB, dsn string) *mysql.Backend {
	t.Helper()
	b, err := mysql.Open(context.Background(), dsn, mysql.Options{})
	if err != nil {
		t.Fatalf("Open(%s): %v", mysql.Redact(dsn), err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

// reopenable opens Backends on fresh databases whose DSN carries params,
// and reopens one on its database, for the suites that restart their
// storage.
func reopenable(params ...string) (open func(t *testing.T) mvcc.Backend, reopen func(t *testing.T, b mvcc.Backend) mvcc.Backend) {
	var mu sync.Mutex
	dsns := map[mvcc.Backend]string{}
	open = func(t *testing.T) mvcc.Backend {
		dsn := mysqltest.NewDatabase(t, params...)
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

// conformance runs backendtest on databases whose DSN carries params.
func conformance(t *testing.T, params ...string) {
	open, reopen := reopenable(params...)
	// A MySQL snapshot is a SQLite database file (snapshot.go).
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

func TestConformance(t *testing.T) { conformance(t) }

// TestConformanceSessionDefaults runs the suite on sessions whose default
// isolation level is not the server's, with snapshot isolation on where
// the server has it: kite names the level of every transaction, so
// nothing may change.
func TestConformanceSessionDefaults(t *testing.T) {
	isolation, snapshot := mysqltest.SessionVariables(t)
	for _, level := range []string{"READ-COMMITTED", "SERIALIZABLE"} {
		params := []string{mysqltest.SessionDefault(isolation, level)}
		name := level
		if snapshot != "" {
			params = append(params, snapshot+"=ON")
			name += "/snapshot_isolation=ON"
		}
		t.Run(name, func(t *testing.T) { conformance(t, params...) })
	}
}

// TestOpenUnknownParameter: a misspelt parameter reaches the server as a
// session variable, which refuses it when Open connects, and the error
// says so.
func TestOpenUnknownParameter(t *testing.T) {
	_, err := mysql.Open(context.Background(), mysqltest.NewDatabase(t, "tsl=true"), mysql.Options{})
	if err == nil || !strings.Contains(err.Error(), "neither a driver parameter") || !strings.Contains(err.Error(), "tsl") {
		t.Fatalf("Open with tsl=true: %v, want an unknown parameter named", err)
	}
}
