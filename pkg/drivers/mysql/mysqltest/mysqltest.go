// Package mysqltest gives tests a fresh MySQL or MariaDB database of their
// own.
//
// Tests find the server through KITE_TEST_MYSQL, a go-sql-driver DSN
// (user[:password]@tcp(host:port)/, with or without a mysql:// in front)
// of an account that may create and drop databases (default
// root@tcp(127.0.0.1:3306)/). Where it is unreachable the test is skipped,
// except under CI=true: there a missing database is a failure, not a
// reason to pass.
//
// A test that must stop, crash or starve its database instead starts a
// mariadbd of its own: NewServer for one server, NewGalera for a Galera
// cluster.
package mysqltest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
)

// DefaultAdminDSN is used when KITE_TEST_MYSQL is not set.
const DefaultAdminDSN = "root@tcp(127.0.0.1:3306)/"

// AdminDSN returns the DSN tests create databases with, without a scheme.
func AdminDSN() string {
	dsn := DefaultAdminDSN
	if env := os.Getenv("KITE_TEST_MYSQL"); env != "" {
		dsn = env
	}
	return strings.TrimPrefix(dsn, "mysql://")
}

// NewDatabase creates an empty database with a random name, drops it when
// t ends, and returns a kite DSN (mysql://...) for it. params, if any,
// are added to the DSN's query ("name=value&...").
func NewDatabase(t testing.TB, params ...string) string {
	t.Helper()
	cfg, err := gomysql.ParseDSN(AdminDSN())
	if err != nil {
		t.Fatalf("mysqltest: KITE_TEST_MYSQL is not a go-sql-driver DSN: %v", err)
	}
	cfg.DBName = ""
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := open(ctx, cfg)
	if err != nil {
		unreachable(t, cfg, err)
	}
	defer admin.Close()
	id := make([]byte, 6)
	if _, err := rand.Read(id); err != nil {
		t.Fatalf("mysqltest: random database name: %v", err)
	}
	name := "kite_test_" + hex.EncodeToString(id)
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("mysqltest: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		admin, err := open(ctx, cfg)
		if err != nil {
			t.Errorf("mysqltest: drop database %s: connect: %v", name, err)
			return
		}
		defer admin.Close()
		if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name); err != nil {
			t.Errorf("mysqltest: drop database %s: %v", name, err)
		}
	})
	dsn := "mysql://" + formatUser(cfg) + cfg.Net + "(" + cfg.Addr + ")/" + name
	if len(params) > 0 {
		dsn += "?" + strings.Join(params, "&")
	}
	return dsn
}

// Exec runs statements on the test server as the admin, in the database
// of dsn (one NewDatabase returned): a test that loads data or looks at
// the server directly.
func Exec(t testing.TB, dsn string, stmts ...string) {
	t.Helper()
	db := Open(t, dsn)
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("mysqltest: %s: %v", s, err)
		}
	}
}

// Open returns an admin connection pool on the database of dsn (one
// NewDatabase returned), closed when t ends.
func Open(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	cfg, err := gomysql.ParseDSN(AdminDSN())
	if err != nil {
		t.Fatalf("mysqltest: %v", err)
	}
	// NewDatabase's DSNs are mysql://user@net(addr)/name?params.
	_, path, ok := strings.Cut(dsn, ")/")
	if !ok {
		t.Fatalf("mysqltest: %s is not a DSN of NewDatabase", dsn)
	}
	cfg.DBName, _, _ = strings.Cut(path, "?")
	cfg.MultiStatements = true
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := open(ctx, cfg)
	if err != nil {
		t.Fatalf("mysqltest: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// formatUser is the user part of a kite DSN in the tcp(...) form, which
// takes the user and password as written.
func formatUser(cfg *gomysql.Config) string {
	switch {
	case cfg.User == "":
		return ""
	case cfg.Passwd == "":
		return cfg.User + "@"
	}
	return cfg.User + ":" + cfg.Passwd + "@"
}

func open(ctx context.Context, cfg *gomysql.Config) (*sql.DB, error) {
	c, err := gomysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(c)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// unreachable skips or, under CI=true, fails t. The message names the
// server but never the password.
func unreachable(t testing.TB, cfg *gomysql.Config, err error) {
	t.Helper()
	msg := fmt.Sprintf("mysqltest: MySQL unreachable at %s@%s(%s) (set KITE_TEST_MYSQL to an admin DSN such as %s): %v",
		url.PathEscape(cfg.User), cfg.Net, cfg.Addr, DefaultAdminDSN, err)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// SessionVariables names the server's session variables for the default
// isolation level (tx_isolation in MariaDB, transaction_isolation in MySQL
// 8) and for snapshot isolation ("" where the server has none: MariaDB has
// it since 10.6.18 and 10.11.8, MySQL not at all).
func SessionVariables(t testing.TB) (isolation, snapshot string) {
	t.Helper()
	db := Open(t, NewDatabase(t))
	isolation = "transaction_isolation"
	if _, err := db.Exec("SELECT @@session.transaction_isolation"); err != nil {
		isolation = "tx_isolation"
	}
	var name, value string
	err := db.QueryRow("SHOW VARIABLES LIKE 'innodb_snapshot_isolation'").Scan(&name, &value)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		t.Fatalf("mysqltest: %v", err)
	default:
		snapshot = name
	}
	return isolation, snapshot
}

// SessionDefault is the DSN parameter that makes name (an isolation
// variable from SessionVariables) the session's default isolation level,
// level as the server spells it (READ-COMMITTED).
func SessionDefault(name, level string) string {
	return name + "=" + url.QueryEscape("'"+level+"'")
}
