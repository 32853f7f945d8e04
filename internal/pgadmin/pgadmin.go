// Package pgadmin creates and drops the throwaway Postgres databases that
// kite's tests (pkg/drivers/postgres/pgtest) and load tools (through
// internal/testenv's Databases) run servers on, through a role that may
// create databases. It is one implementation so that the names, the
// connection strings made from the admin's and the forced drop are the
// same everywhere. Connecting is the caller's: a test skips where a tool
// fails, and each words the error its own way.
package pgadmin

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"
)

// NewName is prefix followed by n random bytes in hex, in lower case:
// kine folds its database name to lower case, and a name that Postgres
// and kine spell differently would be two databases.
func NewName(prefix string, n int) (string, error) {
	id := make([]byte, n)
	if _, err := rand.Read(id); err != nil {
		return "", fmt.Errorf("random database name: %w", err)
	}
	return strings.ToLower(prefix + hex.EncodeToString(id)), nil
}

// Create creates an empty database named name through conn, an admin
// connection.
func Create(ctx context.Context, conn *pgx.Conn, name string) error {
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

// Drop drops the database named name through conn, if it exists. WITH
// (FORCE) ends the sessions a stopped or killed server may have left, so
// the drop never waits on them.
func Drop(ctx context.Context, conn *pgx.Conn, name string) error {
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

// WithDatabase returns the connection string admin (a postgres:// URL
// or key=value pairs) with its database replaced by name.
func WithDatabase(admin, name string) (string, error) {
	if strings.HasPrefix(admin, "postgres://") || strings.HasPrefix(admin, "postgresql://") {
		u, err := url.Parse(admin)
		if err != nil {
			return "", fmt.Errorf("parse the admin connection string as a URL: %w", err)
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
