package test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestStorageUnderTest proves the suite runs on the storage it claims
// (KITE_TEST_DATASTORE): a key put through kite lands in that storage.
func TestStorageUnderTest(t *testing.T) {
	if againstEtcd {
		t.Skip("KITE_TEST_AGAINST_ETCD: no kite storage to look at")
	}
	k := startKite(t)
	ctx := testCtx(t, 30*time.Second)
	if _, err := k.Client.Put(ctx, "where", "here"); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(k.dataDir, "kite.db")
	switch datastore {
	case "sqlite":
		if _, err := os.Stat(db); err != nil {
			t.Fatalf("sqlite mode, but no database in the data dir: %v", err)
		}
	case "raftsql":
		if _, err := os.Stat(filepath.Join(k.dataDir, "member", "wal")); err != nil {
			t.Fatalf("raftsql mode, but no raft log in the data dir: %v", err)
		}
		resp, err := k.Client.MemberList(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Members) != 3 {
			t.Fatalf("raftsql mode, but the member list has %d members", len(resp.Members))
		}
	case "postgres":
		if _, err := os.Stat(db); err == nil {
			t.Fatalf("postgres mode, but kite wrote %s", db)
		}
		i := slices.Index(k.flags, "--datastore-endpoint")
		if i < 0 {
			t.Fatalf("postgres mode, but kite runs with %v", k.flags)
		}
		conn, err := pgx.Connect(ctx, k.flags[i+1])
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM kite_live WHERE key = 'where'::bytea`).Scan(&n); err != nil || n != 1 {
			t.Fatalf("the key is not in the Postgres database: count %d, %v", n, err)
		}
	}
}
