package k8s

// MySQL mode (KITE_K8S_DATASTORE=mysql): every kite the suite starts runs
// on a fresh database of its own, from the main module's
// pkg/drivers/mysql/mysqltest: created on the server of KITE_TEST_MYSQL
// and dropped when the test ends, after kite stopped; an unreachable
// server skips the test, except under CI=true where it fails it.

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kite-db/kite/pkg/drivers/mysql"
)

// checkMySQLStorage: the key TestStorageUnderTest put is in kite's MySQL
// database, at its revision, and kite wrote no SQLite file.
func checkMySQLStorage(t *testing.T, ctx context.Context, k kiteServer, resp *clientv3.PutResponse) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(k.dataDir, "kite.db")); err == nil {
		t.Fatalf("mysql mode, but kite wrote %s", filepath.Join(k.dataDir, "kite.db"))
	}
	if k.dsn == "" {
		t.Fatal("mysql mode, but kite got no --datastore-endpoint")
	}
	cfg, err := mysql.ParseDSN(k.dsn)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var value []byte
	var modRev int64
	if err := db.QueryRowContext(ctx, `SELECT value, mod_rev FROM kite_live WHERE k = ?`,
		[]byte("/registry/kite-k8s/where")).Scan(&value, &modRev); err != nil {
		t.Fatalf("the key is not in kite's MySQL database: %v", err)
	}
	if string(value) != "here" || modRev != resp.Header.Revision {
		t.Errorf("kite_live has value %q at revision %d, want %q at %d", value, modRev, "here", resp.Header.Revision)
	}
	t.Logf("key at revision %d found in kite_live of its MySQL database", modRev)
}
