package k8s

// Postgres mode (KITE_K8S_DATASTORE=postgres): every kite the suite starts
// runs on a fresh database of its own, created on the server of
// KITE_TEST_POSTGRES and dropped when the test ends, after kite stopped.
// The conventions are those of the main module's
// pkg/drivers/postgres/pgtest (this module does not import kite's):
// KITE_TEST_POSTGRES is an admin connection string (default
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable), databases
// are named kite_test_<hex>, and an unreachable server skips the test,
// except under CI=true where it fails it.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	clientv3 "go.etcd.io/etcd/client/v3"
)

const defaultAdminDSN = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// adminDSN is the connection string databases are created with.
func adminDSN() string {
	if dsn := os.Getenv("KITE_TEST_POSTGRES"); dsn != "" {
		return dsn
	}
	return defaultAdminDSN
}

// adminWhere names the server of dsn without its password.
func adminWhere(dsn string) string {
	if cfg, err := pgx.ParseConfig(dsn); err == nil {
		return fmt.Sprintf("%s@%s:%d", cfg.User, cfg.Host, cfg.Port)
	}
	return "the server in KITE_TEST_POSTGRES"
}

// newDatabase creates an empty database with a random name, drops it (WITH
// (FORCE), so connections left open do not stop it) when t ends, and returns
// its connection string.
func newDatabase(t testing.TB) string {
	t.Helper()
	admin := adminDSN()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		msg := fmt.Sprintf("Postgres unreachable at %s (set KITE_TEST_POSTGRES to an admin connection string): %v",
			adminWhere(admin), err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	defer conn.Close(context.Background())
	var id [6]byte
	if _, err := rand.Read(id[:]); err != nil {
		t.Fatalf("random database name: %v", err)
	}
	name := "kite_test_" + hex.EncodeToString(id[:])
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Errorf("drop database %s: connect: %v", name, err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	dsn, err := withDatabase(admin, name)
	if err != nil {
		t.Fatal(err)
	}
	return dsn
}

// withDatabase returns admin with its database replaced by name.
func withDatabase(admin, name string) (string, error) {
	if strings.HasPrefix(admin, "postgres://") || strings.HasPrefix(admin, "postgresql://") {
		u, err := url.Parse(admin)
		if err != nil {
			return "", fmt.Errorf("parse KITE_TEST_POSTGRES as a URL: %w", err)
		}
		u.Path = "/" + name
		q := u.Query()
		if q.Has("dbname") {
			q.Set("dbname", name)
			u.RawQuery = q.Encode()
		}
		return u.String(), nil
	}
	// key=value: a later keyword overrides an earlier one.
	return admin + " dbname=" + name, nil
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
	case "raftsql":
		checkRaftStorage(t, ctx, k, client, resp)
	}
}
