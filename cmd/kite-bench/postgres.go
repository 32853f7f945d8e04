package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/kite-db/kite/internal/pgadmin"
)

// defaultPostgresAdmin is --postgres-admin's default: the local server with
// trust authentication, as the project's tests use it.
const defaultPostgresAdmin = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// pgAdmin is the dbAdmin of postgres mode: it creates and drops the
// benchmark's databases on the server that --postgres-admin names.
type pgAdmin struct {
	dsn     string // --postgres-admin, a postgres:// URL
	log     *slog.Logger
	created []string // names, in creation order
}

// newPGAdmin checks the admin URL and that the server answers.
func newPGAdmin(ctx context.Context, dsn string, log *slog.Logger) (*pgAdmin, error) {
	if err := checkPostgresURL(dsn); err != nil {
		return nil, err
	}
	a := &pgAdmin{dsn: dsn, log: log}
	conn, err := a.connect(ctx)
	if err != nil {
		return nil, err
	}
	var version string
	err = conn.QueryRow(ctx, "SHOW server_version").Scan(&version)
	conn.Close(context.Background())
	if err != nil {
		return nil, fmt.Errorf("postgres at %s: %w", redactDSN(dsn), err)
	}
	log.Info("postgres reachable", "server", redactDSN(dsn), "version", version)
	return a, nil
}

// checkPostgresURL accepts only the URL form: kite's --datastore-endpoint
// and kine's --endpoint choose their driver by the scheme, and the
// per-database URLs are made by replacing the URL's path. It also refuses
// a server off this machine.
func checkPostgresURL(dsn string) error {
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") || u.Host == "" {
		return fmt.Errorf("--postgres-admin %q: want a postgres://user@host:port/db?sslmode=... URL", redactDSN(dsn))
	}
	if err := checkLoopback(u.Host); err != nil {
		return fmt.Errorf("--postgres-admin: %w", err)
	}
	return nil
}

func (a *pgAdmin) connect(ctx context.Context) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, a.dsn)
	if err != nil {
		return nil, fmt.Errorf("connect to postgres at %s (--postgres-admin): %w", redactDSN(a.dsn), redactErr(err, a.dsn))
	}
	return conn, nil
}

// createDatabase creates an empty database named kite_bench_<purpose>_<random>
// and returns its URL (the admin URL with the database replaced).
func (a *pgAdmin) createDatabase(ctx context.Context, purpose string) (string, string, error) {
	// Lower case (pgadmin.NewName): kine folds its database name to lower case.
	name, err := pgadmin.NewName("kite_bench_"+purpose+"_", 4)
	if err != nil {
		return "", "", err
	}
	conn, err := a.connect(ctx)
	if err != nil {
		return "", "", err
	}
	defer conn.Close(context.Background())
	if err := pgadmin.Create(ctx, conn, name); err != nil {
		return "", "", err
	}
	a.created = append(a.created, name)
	a.log.Info("created database", "database", name)
	dsn, err := pgadmin.WithDatabase(a.dsn, name) // a URL: checked by newPGAdmin
	return dsn, dsnPassword(dsn), err
}

// dropAll drops every database this run created (pgadmin.Drop: a
// stopped server's sessions do not hold it up).
func (a *pgAdmin) dropAll() error {
	if len(a.created) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := a.connect(ctx)
	if err != nil {
		return fmt.Errorf("drop databases %s: %w", strings.Join(a.created, ", "), err)
	}
	defer conn.Close(context.Background())
	var errs []error
	for _, name := range a.created {
		if err := pgadmin.Drop(ctx, conn, name); err != nil {
			errs = append(errs, err)
			continue
		}
		a.log.Info("dropped database", "database", name)
	}
	a.created = nil
	return errors.Join(errs...)
}

// redactDSN shows a connection URL without its password.
func redactDSN(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "(unparsable connection string)"
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}

// dsnPassword returns the password a connection URL carries, or "".
func dsnPassword(dsn string) string {
	if u, err := url.Parse(dsn); err == nil {
		if p, has := u.User.Password(); has {
			return p
		}
	}
	return ""
}

// redactErr keeps an error's message but never the URL's password (pgx
// does not print it, but a driver error may quote its input).
func redactErr(err error, dsn string) error {
	if p := dsnPassword(dsn); p != "" && strings.Contains(err.Error(), p) {
		return errors.New(strings.ReplaceAll(err.Error(), p, "xxxxx"))
	}
	return err
}
