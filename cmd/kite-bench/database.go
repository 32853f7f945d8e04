package main

import (
	"context"
	"log/slog"
)

// dbAdmin makes the fresh databases that the servers of a database-server
// mode (postgres, mysql) run on, one per start of a kind, and drops them
// at the end of the run. runCompare defers dropAll before any server
// starts, so an interrupted run leaves none behind unless kite-bench
// itself is killed.
type dbAdmin interface {
	// createDatabase creates an empty database named after purpose and
	// returns the DSN the servers are given, and the password in it
	// ("" if none), which their output must never show.
	createDatabase(ctx context.Context, purpose string) (dsn, password string, err error)
	// dropAll drops every database createDatabase made. It runs on a
	// fresh context: the run's may already be cancelled.
	dropAll() error
}

// newDBAdmin is the dbAdmin of cfg's database-server mode, connected.
func newDBAdmin(ctx context.Context, cfg *config, log *slog.Logger) (dbAdmin, error) {
	if cfg.datastore == datastoreMySQL {
		return newMyAdmin(ctx, cfg.mysqlAdmin, log)
	}
	return newPGAdmin(ctx, cfg.postgresAdmin, log)
}
