package testenv

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// Kinds of database server the load tools run kite and kine on.
const (
	DatabasePostgres = "postgres"
	DatabaseMySQL    = "mysql" // MySQL or MariaDB
)

// dbConnectTimeout bounds one admin connection; dbDropTimeout the drop of
// every database a run made, which runs after the run's context may be
// gone.
const (
	dbConnectTimeout = 15 * time.Second
	dbDropTimeout    = 60 * time.Second
)

// Database is a fresh, empty database on a database server.
type Database struct {
	Name string
	// DSN is what kite's --datastore-endpoint and kine's --endpoint take
	// (a postgres:// URL, or mysql:// and go-sql-driver's form): both read
	// the same strings, so one DSN serves either server.
	DSN string
	// Password is the one in DSN ("" if none): a server's log tail is
	// printed with it masked.
	Password string
}

// Databases makes the fresh databases the servers of a load tool run on,
// and drops them all when the tool is done. A tool defers DropAll before
// any server starts, so an interrupted run leaves none behind unless the
// tool itself is killed.
type Databases interface {
	// Create creates an empty database named prefix+purpose+"_"+random.
	Create(ctx context.Context, purpose string) (Database, error)
	// DropAll drops every database Create made. It runs on a fresh
	// context: the caller's may already be cancelled.
	DropAll() error
}

// CheckDatabaseAdmin checks, without connecting, that admin is a
// connection string of kind the tools accept: one they can make the
// databases' DSNs from, to a server on this machine. Its errors name the
// flag (--postgres-admin, --mysql-admin), which every tool calls alike.
func CheckDatabaseAdmin(kind, admin string) error {
	switch kind {
	case DatabasePostgres:
		return checkPostgresAdmin(admin)
	case DatabaseMySQL:
		_, err := parseMySQLAdmin(admin)
		return err
	}
	return fmt.Errorf("unknown database server %q (want %s or %s)", kind, DatabasePostgres, DatabaseMySQL)
}

// NewDatabases connects to the database server of kind through admin (a
// role or account that may create databases) and checks that it answers.
// The databases it creates are named prefix+purpose+"_"+random, so a
// tool's leftovers can be told from another's.
func NewDatabases(ctx context.Context, log *slog.Logger, kind, admin, prefix string) (Databases, error) {
	switch kind {
	case DatabasePostgres:
		return newPostgresDatabases(ctx, log, admin, prefix)
	case DatabaseMySQL:
		return newMySQLDatabases(ctx, log, admin, prefix)
	}
	return nil, fmt.Errorf("unknown database server %q (want %s or %s)", kind, DatabasePostgres, DatabaseMySQL)
}
