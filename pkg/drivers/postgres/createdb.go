package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrDatabaseMissing: the database the connection string names does not
// exist and its user may not create it. Retrying cannot help, so the
// caller reports it once instead of waiting for the database to appear.
var ErrDatabaseMissing = errors.New("postgres: database does not exist and this user may not create it")

// SQLSTATE codes createDatabase tells apart.
const (
	codeInvalidCatalog = "3D000" // the database does not exist
	codeDuplicateDB    = "42P04" // another server created it first
	codeUniqueKey      = "23505" // ... in the same instant (pg_database's index)
	codeNoPrivilege    = "42501" // insufficient_privilege: no CREATEDB
)

// isMissingDatabase reports whether err is the server refusing a
// connection to a database that does not exist.
func isMissingDatabase(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == codeInvalidCatalog
}

// createDatabase creates the database cfg names, as kine does and k3s users
// expect of an external datastore: connected with the same credentials to
// the server's maintenance database ("postgres", or "template1" where that
// was dropped). Another kite server creating it at the same moment is not
// an error; a user without CREATEDB gets ErrDatabaseMissing, naming the
// database and the user.
func createDatabase(ctx context.Context, cfg *pgx.ConnConfig, log *slog.Logger) error {
	name := cfg.Database
	var conn *pgx.Conn
	var err error
	for _, maint := range []string{"postgres", "template1"} {
		c := cfg.Copy()
		c.Database = maint
		if conn, err = pgx.ConnectConfig(ctx, c); err == nil || !isMissingDatabase(err) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("create missing database %q: connect to the maintenance database: %w", name, err)
	}
	defer closeConn(conn)
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		log.Info("created the missing database", "database", name)
		return nil
	case errors.As(err, &pgErr) && (pgErr.Code == codeDuplicateDB || pgErr.Code == codeUniqueKey):
		return nil
	case errors.As(err, &pgErr) && pgErr.Code == codeNoPrivilege:
		return fmt.Errorf("%w: database %q, user %q (create it, or grant CREATEDB): %w", ErrDatabaseMissing, name, cfg.User, err)
	default:
		return fmt.Errorf("create missing database %q: %w", name, err)
	}
}
