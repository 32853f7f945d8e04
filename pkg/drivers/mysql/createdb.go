package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	gomysql "github.com/go-sql-driver/mysql"
)

// ErrDatabaseMissing: the database the DSN names does not exist, or its
// user may not use it, and the user may not create it. (MySQL answers a
// user without privileges on a database "access denied" whether it exists
// or not.) Retrying cannot help, so the caller reports it once instead of
// waiting for the database to appear.
var ErrDatabaseMissing = errors.New("mysql: database does not exist or this user may not use it, and may not create it")

// Errors createDatabase tells apart.
const (
	erBadDB          = 1049 // ER_BAD_DB_ERROR: unknown database
	erDBAccessDenied = 1044 // ER_DBACCESS_DENIED_ERROR
	erSpecificDenied = 1227 // ER_SPECIFIC_ACCESS_DENIED_ERROR
)

// isMissingDatabase reports whether err is the server refusing a
// connection to a database that does not exist or that the user has no
// privilege on.
func isMissingDatabase(err error) bool {
	var me *gomysql.MySQLError
	return errors.As(err, &me) && (me.Number == erBadDB || me.Number == erDBAccessDenied)
}

// createDatabase creates the database cfg names, as kine does and k3s
// users expect of an external datastore: connected with the same
// credentials to no database. Servers starting at once race harmlessly
// (IF NOT EXISTS); a user who may not create it gets ErrDatabaseMissing,
// naming the database and the user. The character set is irrelevant to
// kite's binary columns; the server's default is kept.
func createDatabase(ctx context.Context, cfg *gomysql.Config, log *slog.Logger) error {
	c := cfg.Clone()
	c.DBName = ""
	connector, err := gomysql.NewConnector(c)
	if err != nil {
		return fmt.Errorf("create missing database %q: %w", cfg.DBName, err)
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	_, err = db.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS "+quoteIdent(cfg.DBName))
	var me *gomysql.MySQLError
	switch {
	case err == nil:
		log.Info("created the missing database", "database", cfg.DBName)
		return nil
	case errors.As(err, &me) && (me.Number == erDBAccessDenied || me.Number == erSpecificDenied):
		return fmt.Errorf("%w: database %q, user %q (create it and grant the user ALL on it, or grant CREATE): %w", ErrDatabaseMissing, cfg.DBName, cfg.User, err)
	default:
		return fmt.Errorf("create missing database %q: %w", cfg.DBName, err)
	}
}

// quoteIdent quotes a MySQL identifier: backticks, a backtick doubled.
func quoteIdent(name string) string {
	return "`" + strings.ReplaceAll(name, "`", "``") + "`"
}
