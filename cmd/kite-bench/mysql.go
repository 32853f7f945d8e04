package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/kite-db/kite/internal/pgadmin"
	kitemysql "github.com/kite-db/kite/pkg/drivers/mysql"
)

// defaultMySQLAdmin is --mysql-admin's default: the local MariaDB or MySQL
// as root with no password, as the project's tests use it.
const defaultMySQLAdmin = "mysql://root@tcp(127.0.0.1:3306)/"

// myAdmin creates and drops the benchmark's databases on the MySQL or
// MariaDB server that --mysql-admin names, as pgAdmin does on Postgres.
// The databases' DSNs are in go-sql-driver's form behind mysql://, which
// kite's --datastore-endpoint and kine's --endpoint both read.
type myAdmin struct {
	cfg     *gomysql.Config // --mysql-admin, parsed, without a database
	dsn     string          // --mysql-admin as given, for messages (redacted)
	log     *slog.Logger
	created []string
}

// newMyAdmin checks the admin DSN and that the server answers.
func newMyAdmin(ctx context.Context, dsn string, log *slog.Logger) (*myAdmin, error) {
	cfg, err := parseMySQLAdmin(dsn)
	if err != nil {
		return nil, err
	}
	a := &myAdmin{cfg: cfg, dsn: dsn, log: log}
	db, err := a.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	var version string
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		return nil, fmt.Errorf("mysql at %s: %w", kitemysql.Redact(dsn), err)
	}
	log.Info("mysql reachable", "server", kitemysql.Redact(dsn), "version", version)
	return a, nil
}

// parseMySQLAdmin accepts go-sql-driver's form, with or without mysql://
// in front, over TCP to this machine and without a database or
// parameters: the databases' DSNs are made by appending a name to it.
func parseMySQLAdmin(dsn string) (*gomysql.Config, error) {
	bad := func(why string) error {
		return fmt.Errorf("--mysql-admin %q: %s; want mysql://user[:password]@tcp(host:port)/", kitemysql.Redact(dsn), why)
	}
	cfg, err := gomysql.ParseDSN(strings.TrimPrefix(dsn, "mysql://"))
	switch {
	case err != nil:
		return nil, bad("not a go-sql-driver DSN")
	case cfg.Net != "tcp":
		return nil, bad("not over tcp")
	case cfg.DBName != "" || strings.Contains(dsn, "?"):
		return nil, bad("it names a database or parameters")
	}
	if err := checkLoopback(cfg.Addr); err != nil {
		return nil, fmt.Errorf("--mysql-admin: %w", err)
	}
	return cfg, nil
}

func (a *myAdmin) connect(ctx context.Context) (*sql.DB, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	connector, err := gomysql.NewConnector(a.cfg)
	if err != nil {
		return nil, fmt.Errorf("mysql at %s (--mysql-admin): %w", kitemysql.Redact(a.dsn), err)
	}
	db := sql.OpenDB(connector)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("connect to mysql at %s (--mysql-admin): %w", kitemysql.Redact(a.dsn), err)
	}
	return db, nil
}

// createDatabase creates an empty database named kite_bench_<purpose>_<random>
// and returns its DSN.
func (a *myAdmin) createDatabase(ctx context.Context, purpose string) (string, string, error) {
	name, err := pgadmin.NewName("kite_bench_"+purpose+"_", 4)
	if err != nil {
		return "", "", err
	}
	db, err := a.connect(ctx)
	if err != nil {
		return "", "", err
	}
	defer db.Close()
	// The name is ours: lower-case letters, digits and underscores.
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		return "", "", fmt.Errorf("create database %s: %w", name, err)
	}
	a.created = append(a.created, name)
	a.log.Info("created database", "database", name)
	user := a.cfg.User
	if a.cfg.Passwd != "" {
		user += ":" + a.cfg.Passwd
	}
	return "mysql://" + user + "@tcp(" + a.cfg.Addr + ")/" + name, a.cfg.Passwd, nil
}

// dropAll drops every database this run created, on a fresh context.
func (a *myAdmin) dropAll() error {
	if len(a.created) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db, err := a.connect(ctx)
	if err != nil {
		return fmt.Errorf("drop databases %s: %w", strings.Join(a.created, ", "), err)
	}
	defer db.Close()
	var errs []error
	for _, name := range a.created {
		if _, err := db.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name); err != nil {
			errs = append(errs, fmt.Errorf("drop database %s: %w", name, err))
			continue
		}
		a.log.Info("dropped database", "database", name)
	}
	a.created = nil
	return errors.Join(errs...)
}
