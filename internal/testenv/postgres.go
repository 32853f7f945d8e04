package testenv

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/kite-db/kite/internal/pgadmin"
)

// DefaultPostgresAdmin is the tools' --postgres-admin default: the local
// server with trust authentication, as the project's tests use it.
const DefaultPostgresAdmin = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// postgresDatabases is Databases on a Postgres server; pgadmin does the
// statements, as it does for the tests.
type postgresDatabases struct {
	admin   string // a postgres:// URL
	prefix  string
	log     *slog.Logger
	created []string // names, in creation order
}

func newPostgresDatabases(ctx context.Context, log *slog.Logger, admin, prefix string) (*postgresDatabases, error) {
	if err := checkPostgresAdmin(admin); err != nil {
		return nil, err
	}
	d := &postgresDatabases{admin: admin, prefix: prefix, log: log}
	conn, err := d.connect(ctx)
	if err != nil {
		return nil, err
	}
	var version string
	err = conn.QueryRow(ctx, "SHOW server_version").Scan(&version)
	conn.Close(context.Background())
	if err != nil {
		return nil, fmt.Errorf("postgres at %s: %w", redactURL(admin), err)
	}
	log.Info("postgres reachable", "server", redactURL(admin), "version", version)
	return d, nil
}

// checkPostgresAdmin accepts only the URL form: kite's
// --datastore-endpoint and kine's --endpoint choose their driver by the
// scheme, and the per-database URLs are made by replacing the URL's
// path. It also refuses a server off this machine.
func checkPostgresAdmin(admin string) error {
	u, err := url.Parse(admin)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") || u.Host == "" {
		return fmt.Errorf("--postgres-admin %q: want a postgres://user@host:port/db?sslmode=... URL", redactURL(admin))
	}
	if err := CheckLoopback(u.Host); err != nil {
		return fmt.Errorf("--postgres-admin: %w", err)
	}
	return nil
}

func (d *postgresDatabases) connect(ctx context.Context) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, dbConnectTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, d.admin)
	if err != nil {
		return nil, fmt.Errorf("connect to postgres at %s (--postgres-admin): %w", redactURL(d.admin), redactErr(err, urlPassword(d.admin)))
	}
	return conn, nil
}

func (d *postgresDatabases) Create(ctx context.Context, purpose string) (Database, error) {
	// Lower case (pgadmin.NewName): kine folds its database name to lower case.
	name, err := pgadmin.NewName(d.prefix+purpose+"_", 4)
	if err != nil {
		return Database{}, err
	}
	conn, err := d.connect(ctx)
	if err != nil {
		return Database{}, err
	}
	defer conn.Close(context.Background())
	if err := pgadmin.Create(ctx, conn, name); err != nil {
		return Database{}, err
	}
	d.created = append(d.created, name)
	d.log.Info("created database", "database", name)
	dsn, err := pgadmin.WithDatabase(d.admin, name) // a URL: checked by newPostgresDatabases
	if err != nil {
		return Database{}, err
	}
	return Database{Name: name, DSN: dsn, Password: urlPassword(dsn)}, nil
}

// DropAll drops with pgadmin.Drop, so a stopped server's sessions do not
// hold a drop up.
func (d *postgresDatabases) DropAll() error {
	if len(d.created) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), dbDropTimeout)
	defer cancel()
	conn, err := d.connect(ctx)
	if err != nil {
		return fmt.Errorf("drop databases %s: %w", strings.Join(d.created, ", "), err)
	}
	defer conn.Close(context.Background())
	var errs []error
	for _, name := range d.created {
		if err := pgadmin.Drop(ctx, conn, name); err != nil {
			errs = append(errs, err)
			continue
		}
		d.log.Info("dropped database", "database", name)
	}
	d.created = nil
	return errors.Join(errs...)
}

// redactURL shows a connection URL without its password.
func redactURL(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "(unparsable connection string)"
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}

// urlPassword returns the password a connection URL carries, or "".
func urlPassword(dsn string) string {
	if u, err := url.Parse(dsn); err == nil {
		if p, has := u.User.Password(); has {
			return p
		}
	}
	return ""
}

// redactErr keeps an error's message but never password (pgx does not
// print it, but a driver error may quote its input).
func redactErr(err error, password string) error {
	if password != "" && strings.Contains(err.Error(), password) {
		return errors.New(strings.ReplaceAll(err.Error(), password, "xxxxx"))
	}
	return err
}
