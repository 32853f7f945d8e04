package testenv

import (
	"context"
	"database/sql"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
)

// TestDatabases creates a database on the local Postgres and on the local
// MySQL or MariaDB (KITE_TEST_POSTGRES, KITE_TEST_MYSQL override the
// tools' defaults), connects to it through the DSN a server would get,
// and drops it. A server that does not answer skips its kind, except
// under CI=true.
func TestDatabases(t *testing.T) {
	for _, c := range []struct {
		kind, env, admin string
		// open connects through a database's DSN and runs a statement.
		open func(ctx context.Context, dsn string) error
	}{
		{DatabasePostgres, "KITE_TEST_POSTGRES", DefaultPostgresAdmin, func(ctx context.Context, dsn string) error {
			conn, err := pgx.Connect(ctx, dsn)
			if err != nil {
				return err
			}
			defer conn.Close(context.Background())
			_, err = conn.Exec(ctx, "CREATE TABLE t (k int)")
			return err
		}},
		{DatabaseMySQL, "KITE_TEST_MYSQL", DefaultMySQLAdmin, func(ctx context.Context, dsn string) error {
			cfg, err := gomysql.ParseDSN(strings.TrimPrefix(dsn, "mysql://"))
			if err != nil {
				return err
			}
			connector, err := gomysql.NewConnector(cfg)
			if err != nil {
				return err
			}
			db := sql.OpenDB(connector)
			defer db.Close()
			_, err = db.ExecContext(ctx, "CREATE TABLE t (k int)")
			return err
		}},
	} {
		t.Run(c.kind, func(t *testing.T) {
			admin := c.admin
			if v := os.Getenv(c.env); v != "" {
				admin = v
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			dbs, err := NewDatabases(ctx, slog.New(slog.DiscardHandler), c.kind, admin, "kite_testenv_")
			if err != nil {
				if os.Getenv("CI") == "true" {
					t.Fatal(err)
				}
				t.Skipf("%s unreachable (set %s): %v", c.kind, c.env, err)
			}
			d, err := dbs.Create(ctx, "probe")
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(d.Name, "kite_testenv_probe_") || !strings.HasSuffix(d.DSN, "/"+d.Name) && !strings.Contains(d.DSN, "/"+d.Name+"?") {
				t.Errorf("database %+v: want a kite_testenv_probe_ name in its DSN", d)
			}
			if err := c.open(ctx, d.DSN); err != nil {
				t.Errorf("use %s: %v", d.Name, err)
			}
			if err := dbs.DropAll(); err != nil {
				t.Fatal(err)
			}
			if err := c.open(ctx, d.DSN); err == nil {
				t.Errorf("%s still there after DropAll", d.Name)
			}
		})
	}
}

func TestCheckDatabaseAdmin(t *testing.T) {
	for _, c := range []struct {
		kind, admin string
		ok          bool
	}{
		{DatabasePostgres, DefaultPostgresAdmin, true},
		{DatabasePostgres, "host=127.0.0.1 user=postgres", false},
		{DatabasePostgres, "postgres://u@10.0.0.1:5432/postgres", false},
		{DatabaseMySQL, DefaultMySQLAdmin, true},
		{DatabaseMySQL, "mysql://root@tcp(127.0.0.1:3306)/db", false},
		{DatabaseMySQL, "mysql://root:pw@tcp(10.0.0.1:3306)/", false},
		{"sqlite", "x", false},
	} {
		if err := CheckDatabaseAdmin(c.kind, c.admin); (err == nil) != c.ok {
			t.Errorf("CheckDatabaseAdmin(%s, %q) = %v; want ok=%v", c.kind, c.admin, err, c.ok)
		}
	}
	if got := redactMySQL("mysql://root:secret@tcp(127.0.0.1:3306)/"); strings.Contains(got, "secret") {
		t.Errorf("redactMySQL kept the password: %q", got)
	}
}
