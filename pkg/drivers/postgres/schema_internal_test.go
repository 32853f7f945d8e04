package postgres

import (
	"context"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kite-db/kite/pkg/drivers/postgres/pgtest"
	"github.com/kite-db/kite/pkg/mvcc"
)

// TestMigrateFromVersion1: a database written by a kite of schema version
// 1 (no kite_auth) keeps its data and is brought to the current version at
// Open, after which the auth state can be stored.
func TestMigrateFromVersion1(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.NewDatabase(t)
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := migrateTo(ctx, pool, slog.New(slog.DiscardHandler), migrations()[:1]); err != nil {
		t.Fatalf("migrate to version 1: %v", err)
	}
	schema := func() (version int, authTable bool) {
		t.Helper()
		err := pool.QueryRow(ctx, `SELECT (SELECT version FROM kite_schema),
			to_regclass('kite_auth') IS NOT NULL`).Scan(&version, &authTable)
		if err != nil {
			t.Fatal(err)
		}
		return version, authTable
	}
	if v, auth := schema(); v != 1 || auth {
		t.Fatalf("after the first step: version %d, kite_auth exists %v; want 1, false", v, auth)
	}
	// Data a version 1 kite wrote.
	if _, err := pool.Exec(ctx, `INSERT INTO kite_lease (id, ttl) VALUES (7, 70);
		UPDATE kite_revision SET current_rev = 0, compacted_rev = 0`); err != nil {
		t.Fatal(err)
	}

	for i := range 2 { // the second Open finds the current version
		b, err := Open(ctx, dsn, Options{})
		if err != nil {
			t.Fatalf("Open #%d: %v", i+1, err)
		}
		if v, auth := schema(); v != schemaVersion() || !auth {
			t.Errorf("after Open #%d: version %d, kite_auth exists %v; want %d, true", i+1, v, auth, schemaVersion())
		}
		r, err := b.BeginRead(ctx)
		if err != nil {
			t.Fatal(err)
		}
		leases, err := r.Leases(ctx)
		if err != nil || len(leases) != 1 || leases[0] != (mvcc.Lease{ID: 7, TTL: 70}) {
			t.Errorf("Leases after migration = %v, %v; want the lease of version 1", leases, err)
		}
		state, err := r.AuthState(ctx)
		want := map[int]string{0: "", 1: "state"}[i]
		if err != nil || string(state) != want || (i == 0) != (state == nil) {
			t.Errorf("Open #%d: AuthState = %q, %v; want %q", i+1, state, err, want)
		}
		if err := r.Rollback(); err != nil {
			t.Fatal(err)
		}
		w, err := b.BeginWrite(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.PutAuthState(ctx, []byte("state")); err != nil {
			t.Fatal(err)
		}
		if err := w.Commit(); err != nil {
			t.Fatalf("commit auth state: %v", err)
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
