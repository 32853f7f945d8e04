package postgres_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/kite-db/kite/internal/pgadmin"
	"github.com/kite-db/kite/pkg/drivers/postgres"
	"github.com/kite-db/kite/pkg/drivers/postgres/pgtest"
)

// missingDatabase returns the connection string of a database that does
// not exist yet, as user (the admin's user if empty), dropped when t ends
// if something created it.
func missingDatabase(t *testing.T, user string) (dsn, name string) {
	t.Helper()
	name, err := pgadmin.NewName("kite_test_missing_", 6)
	if err != nil {
		t.Fatal(err)
	}
	admin := pgtest.AdminDSN()
	if dsn, err = pgadmin.WithDatabase(admin, name); err != nil {
		t.Fatal(err)
	}
	if user != "" {
		cfg, err := pgx.ParseConfig(dsn)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(dsn, "://") {
			dsn = strings.Replace(dsn, "://"+cfg.User+"@", "://"+user+"@", 1)
		} else {
			dsn += " user=" + user
		}
	}
	t.Cleanup(func() { adminExec(t, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)") })
	return dsn, name
}

// adminExec runs one statement as the test server's admin.
func adminExec(t *testing.T, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgtest.AdminDSN())
	if err != nil {
		t.Fatalf("connect as admin: %v", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// TestOpenCreatesMissingDatabase: a database that does not exist is
// created when the user may, by several servers starting at once too.
func TestOpenCreatesMissingDatabase(t *testing.T) {
	pgtest.NewDatabase(t) // skips, or fails under CI, without a server
	dsn, _ := missingDatabase(t, "")
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Go(func() {
			b, err := postgres.Open(context.Background(), dsn, postgres.Options{})
			if err == nil {
				err = b.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("server %d: Open of a missing database: %v", i, err)
		}
	}
	// It exists now, with kite's schema.
	b := mustOpen(t, dsn)
	tx, err := b.BeginRead(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if cur, _, err := tx.Revisions(context.Background()); err != nil || cur != 0 {
		t.Fatalf("revisions of the created database: %d, %v", cur, err)
	}
}

// TestOpenMissingDatabaseWithoutCreateDB: a user who may not create the
// database gets ErrDatabaseMissing naming it, at once.
func TestOpenMissingDatabaseWithoutCreateDB(t *testing.T) {
	pgtest.NewDatabase(t)
	role, err := pgadmin.NewName("kite_test_nocreate_", 4)
	if err != nil {
		t.Fatal(err)
	}
	adminExec(t, "CREATE ROLE "+role+" LOGIN NOCREATEDB")
	t.Cleanup(func() { adminExec(t, "DROP ROLE IF EXISTS "+role) })
	dsn, name := missingDatabase(t, role)
	_, err = postgres.Open(context.Background(), dsn, postgres.Options{})
	if !errors.Is(err, postgres.ErrDatabaseMissing) {
		t.Fatalf("Open as a user without CREATEDB: %v; want ErrDatabaseMissing", err)
	}
	if !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), role) {
		t.Errorf("the error names neither the database %s nor the user %s: %v", name, role, err)
	}
}
