package datastore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/kite-db/kite/internal/pgadmin"
	"github.com/kite-db/kite/pkg/drivers/postgres"
	"github.com/kite-db/kite/pkg/drivers/postgres/pgtest"
)

func TestKind(t *testing.T) {
	for _, tt := range []struct {
		endpoint, want string
		wantErr        bool
	}{
		{"", KindSQLite, false},
		{"sqlite:///var/lib/kite/kite.db", KindSQLite, false},
		{"postgres://u:p@127.0.0.1/db?sslmode=disable", KindPostgres, false},
		{"postgresql://127.0.0.1/db", KindPostgres, false},
		{"mysql://u:secret@tcp(127.0.0.1:3306)/db", KindMySQL, false},
		{"mysql://u:secret@127.0.0.1/db", KindMySQL, false},
		{"mongodb://u:secret@127.0.0.1/db", "", true},
		{"u:secret@127.0.0.1/db", "", true},
	} {
		got, err := Kind(tt.endpoint)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("Kind(%q) = %q, %v; want %q, error %v", tt.endpoint, got, err, tt.want, tt.wantErr)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("Kind(%q) error shows the password: %v", tt.endpoint, err)
		}
	}
}

func TestRedact(t *testing.T) {
	for _, in := range []string{
		"postgres://kite:secret@db.example:5432/kite?sslmode=verify-full",
		"postgres://kite@db.example/kite?password=secret",
		"postgres://kite:secret@[::1/kite", // not a URL: only the scheme is shown
		"mysql://kite:secret@tcp(db.example:3306)/kite",
		"mysql://kite:secret@db.example:3306/kite?tls=true",
	} {
		if got := Redact(in); strings.Contains(got, "secret") {
			t.Errorf("Redact(%q) = %q shows the password", in, got)
		}
	}
	if got, want := Redact("postgres://kite@127.0.0.1/kite"), "postgres://kite@127.0.0.1/kite"; got != want {
		t.Errorf("Redact of an endpoint without a password = %q; want it unchanged", got)
	}
}

func TestSQLitePath(t *testing.T) {
	if got, want := SQLitePath("", "/d"), filepath.Join("/d", "kite.db"); got != want {
		t.Errorf("SQLitePath(\"\") = %q; want %q", got, want)
	}
	if got, want := SQLitePath("sqlite:///x/y.db", "/d"), "/x/y.db"; got != want {
		t.Errorf("SQLitePath(sqlite:///x/y.db) = %q; want %q", got, want)
	}
}

// TestOpenRetriesUnreachableDatabase: a database server that does not answer
// is retried until ctx ends, and the error then does not show the password.
func TestOpenRetriesUnreachableDatabase(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2500*time.Millisecond)
	defer cancel()
	start := time.Now()
	// Port 1 on loopback: nothing listens there.
	_, err := Open(ctx, Config{Endpoint: "postgres://kite:secret@127.0.0.1:1/kite?sslmode=disable&connect_timeout=1"})
	if err == nil {
		t.Fatal("Open of an unreachable database succeeded")
	}
	if time.Since(start) < 2*time.Second {
		t.Errorf("Open gave up after %v; want retries until ctx ends", time.Since(start))
	}
	if strings.Contains(err.Error(), "secret") {
		t.Errorf("error shows the password: %v", err)
	}
}

func TestOpenSQLite(t *testing.T) {
	dir := t.TempDir()
	b, err := Open(context.Background(), Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := os.Stat(filepath.Join(dir, "kite.db")); err != nil {
		t.Fatalf("the default datastore is not kite.db in the data dir: %v", err)
	}
}

// TestOpenMissingDatabaseNotRetried: a database that does not exist and
// that the user may not create is reported at once, not retried until ctx
// ends as an unreachable server is.
func TestOpenMissingDatabaseNotRetried(t *testing.T) {
	pgtest.NewDatabase(t) // skips, or fails under CI, without a server
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, pgtest.AdminDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	role, err := pgadmin.NewName("kite_test_nocreate_", 4)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "CREATE ROLE "+role+" LOGIN NOCREATEDB"); err != nil {
		t.Fatal(err)
	}
	defer admin.Exec(context.Background(), "DROP ROLE "+role)
	cfg, err := pgx.ParseConfig(pgtest.AdminDSN())
	if err != nil {
		t.Fatal(err)
	}
	endpoint := fmt.Sprintf("postgres://%s@%s:%d/%s_db?sslmode=disable", role, cfg.Host, cfg.Port, role)
	_, err = Open(ctx, Config{Endpoint: endpoint})
	if !errors.Is(err, postgres.ErrDatabaseMissing) || ctx.Err() != nil {
		t.Fatalf("Open of a database the user may not create: %v (ctx: %v); want ErrDatabaseMissing at once", err, ctx.Err())
	}
}
