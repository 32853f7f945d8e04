package k8s

// Postgres mode (KITE_K8S_DATASTORE=postgres): every kite the suite starts
// runs on a fresh database of its own, from the main module's
// pkg/drivers/postgres/pgtest: created on the server of KITE_TEST_POSTGRES
// and dropped when the test ends, after kite stopped; an unreachable
// server skips the test, except under CI=true where it fails it.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// adminWhere names the server of dsn without its password.
func adminWhere(dsn string) string {
	if cfg, err := pgx.ParseConfig(dsn); err == nil {
		return fmt.Sprintf("%s@%s:%d", cfg.User, cfg.Host, cfg.Port)
	}
	return "the server in KITE_TEST_POSTGRES"
}

// TestStorageUnderTest proves the suite runs on the storage it claims
// (KITE_K8S_DATASTORE): a key put through kite lands in that storage, and
// in postgres mode nowhere else (in raftsql mode: in the databases of all
// three members; see checkRaftStorage).
func TestStorageUnderTest(t *testing.T) {
	if backend != "kite" {
		t.Skipf("KITE_K8S_BACKEND=%s: no kite storage to look at", backend)
	}
	k := startKite(t, serverOptions{})
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{k.endpoint}, TLS: clientTLS(), DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := client.Put(ctx, "/registry/kite-k8s/where", "here")
	if err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(k.dataDir, "kite.db")
	switch datastore {
	case "sqlite":
		if k.dsn != "" {
			t.Fatalf("sqlite mode, but kite runs on %s", k.dsn)
		}
		if _, err := os.Stat(db); err != nil {
			t.Fatalf("sqlite mode, but no database in the data dir: %v", err)
		}
		if slices.Contains(kiteFlags, "--experimental-sqlite-log-commit") {
			if _, err := os.Stat(db + ".log"); err != nil {
				t.Fatalf("--experimental-sqlite-log-commit, but no log next to the database: %v", err)
			}
		}
	case "postgres":
		if _, err := os.Stat(db); err == nil {
			t.Fatalf("postgres mode, but kite wrote %s", db)
		}
		if k.dsn == "" {
			t.Fatal("postgres mode, but kite got no --datastore-endpoint")
		}
		conn, err := pgx.Connect(ctx, k.dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		var rev int64
		if err := conn.QueryRow(ctx, `SELECT current_rev FROM kite_revision`).Scan(&rev); err != nil {
			t.Fatalf("kite_revision of kite's database: %v", err)
		}
		if rev < resp.Header.Revision {
			t.Errorf("kite_revision.current_rev = %d, below the put's revision %d", rev, resp.Header.Revision)
		}
		var value []byte
		var modRev int64
		if err := conn.QueryRow(ctx, `SELECT value, mod_rev FROM kite_live WHERE key = $1`,
			[]byte("/registry/kite-k8s/where")).Scan(&value, &modRev); err != nil {
			t.Fatalf("the key is not in kite's Postgres database: %v", err)
		}
		if string(value) != "here" || modRev != resp.Header.Revision {
			t.Errorf("kite_live has value %q at revision %d, want %q at %d", value, modRev, "here", resp.Header.Revision)
		}
		t.Logf("key at revision %d found in kite_live of its database; kite_revision.current_rev = %d", modRev, rev)
	case "mysql":
		checkMySQLStorage(t, ctx, k, resp)
	case "raftsql":
		checkRaftStorage(t, ctx, k, client, resp)
	}
}
