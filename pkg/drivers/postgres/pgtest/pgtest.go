// Package pgtest gives tests a fresh Postgres database of their own.
//
// Tests find the server through KITE_TEST_POSTGRES, a connection string
// with rights to create databases (default
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable). Where it
// is unreachable the test is skipped, except under CI=true: there a
// missing database is a failure, not a reason to pass.
package pgtest

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/kite-db/kite/internal/pgadmin"
)

// DefaultAdminDSN is used when KITE_TEST_POSTGRES is not set.
const DefaultAdminDSN = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// AdminDSN returns the connection string tests create databases with.
func AdminDSN() string {
	if dsn := os.Getenv("KITE_TEST_POSTGRES"); dsn != "" {
		return dsn
	}
	return DefaultAdminDSN
}

// NewDatabase creates an empty database with a random name, drops it (WITH
// (FORCE), so connections left open do not stop it) when t ends, and
// returns its connection string.
func NewDatabase(t testing.TB) string {
	t.Helper()
	admin := AdminDSN()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		unreachable(t, admin, err)
	}
	defer conn.Close(context.Background())
	name, err := pgadmin.NewName("kite_test_", 6)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if err := pgadmin.Create(ctx, conn, name); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Errorf("pgtest: drop database %s: connect: %v", name, err)
			return
		}
		defer conn.Close(context.Background())
		if err := pgadmin.Drop(ctx, conn, name); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	dsn, err := pgadmin.WithDatabase(admin, name)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return dsn
}

// unreachable skips or, under CI=true, fails t. The message names the
// server but never the password.
func unreachable(t testing.TB, admin string, err error) {
	t.Helper()
	where := "the server in KITE_TEST_POSTGRES"
	if cfg, perr := pgx.ParseConfig(admin); perr == nil {
		where = fmt.Sprintf("%s@%s:%d", cfg.User, cfg.Host, cfg.Port)
	}
	msg := fmt.Sprintf("pgtest: Postgres unreachable at %s (set KITE_TEST_POSTGRES to an admin connection string): %v",
		where, err)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}
