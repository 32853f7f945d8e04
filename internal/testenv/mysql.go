package testenv

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/kite-db/kite/internal/pgadmin"
)

// DefaultMySQLAdmin is the tools' --mysql-admin default: the local
// MariaDB or MySQL as root with no password, as the project's tests use
// it.
const DefaultMySQLAdmin = "mysql://root@tcp(127.0.0.1:3306)/"

// mysqlDatabases is Databases on a MySQL or MariaDB server. The
// databases' DSNs are in go-sql-driver's form behind mysql://, which
// kite's --datastore-endpoint and kine's --endpoint both read.
type mysqlDatabases struct {
	cfg     *gomysql.Config // the admin DSN, parsed, without a database
	admin   string          // as given, for messages (redacted)
	prefix  string
	log     *slog.Logger
	created []string
}

func newMySQLDatabases(ctx context.Context, log *slog.Logger, admin, prefix string) (*mysqlDatabases, error) {
	cfg, err := parseMySQLAdmin(admin)
	if err != nil {
		return nil, err
	}
	d := &mysqlDatabases{cfg: cfg, admin: admin, prefix: prefix, log: log}
	db, err := d.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	var version string
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		return nil, fmt.Errorf("mysql at %s: %w", redactMySQL(admin), err)
	}
	log.Info("mysql reachable", "server", redactMySQL(admin), "version", version)
	return d, nil
}

// parseMySQLAdmin accepts go-sql-driver's form, with or without mysql://
// in front, over TCP to this machine and without a database or
// parameters: the databases' DSNs are made by appending a name to it.
func parseMySQLAdmin(admin string) (*gomysql.Config, error) {
	bad := func(why string) error {
		return fmt.Errorf("--mysql-admin %q: %s; want mysql://user[:password]@tcp(host:port)/", redactMySQL(admin), why)
	}
	cfg, err := gomysql.ParseDSN(strings.TrimPrefix(admin, "mysql://"))
	switch {
	case err != nil:
		return nil, bad("not a go-sql-driver DSN")
	case cfg.Net != "tcp":
		return nil, bad("not over tcp")
	case cfg.DBName != "" || strings.Contains(admin, "?"):
		return nil, bad("it names a database or parameters")
	}
	if err := CheckLoopback(cfg.Addr); err != nil {
		return nil, fmt.Errorf("--mysql-admin: %w", err)
	}
	return cfg, nil
}

// OpenMySQLAdmin connects through admin, a DSN CheckDatabaseAdmin
// accepts; the caller closes the handle. Tests use it to list what the
// tools left behind.
func OpenMySQLAdmin(ctx context.Context, admin string) (*sql.DB, error) {
	cfg, err := parseMySQLAdmin(admin)
	if err != nil {
		return nil, err
	}
	return (&mysqlDatabases{cfg: cfg, admin: admin}).connect(ctx)
}

func (d *mysqlDatabases) connect(ctx context.Context) (*sql.DB, error) {
	ctx, cancel := context.WithTimeout(ctx, dbConnectTimeout)
	defer cancel()
	connector, err := gomysql.NewConnector(d.cfg)
	if err != nil {
		return nil, fmt.Errorf("mysql at %s (--mysql-admin): %w", redactMySQL(d.admin), err)
	}
	db := sql.OpenDB(connector)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("connect to mysql at %s (--mysql-admin): %w", redactMySQL(d.admin), redactErr(err, d.cfg.Passwd))
	}
	return db, nil
}

func (d *mysqlDatabases) Create(ctx context.Context, purpose string) (Database, error) {
	name, err := pgadmin.NewName(d.prefix+purpose+"_", 4)
	if err != nil {
		return Database{}, err
	}
	db, err := d.connect(ctx)
	if err != nil {
		return Database{}, err
	}
	defer db.Close()
	// The name is ours: lower-case letters, digits and underscores.
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		return Database{}, fmt.Errorf("create database %s: %w", name, err)
	}
	d.created = append(d.created, name)
	d.log.Info("created database", "database", name)
	user := d.cfg.User
	if d.cfg.Passwd != "" {
		user += ":" + d.cfg.Passwd
	}
	return Database{Name: name, DSN: "mysql://" + user + "@tcp(" + d.cfg.Addr + ")/" + name, Password: d.cfg.Passwd}, nil
}

func (d *mysqlDatabases) DropAll() error {
	if len(d.created) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), dbDropTimeout)
	defer cancel()
	db, err := d.connect(ctx)
	if err != nil {
		return fmt.Errorf("drop databases %s: %w", strings.Join(d.created, ", "), err)
	}
	defer db.Close()
	var errs []error
	for _, name := range d.created {
		if _, err := db.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name); err != nil {
			errs = append(errs, fmt.Errorf("drop database %s: %w", name, err))
			continue
		}
		d.log.Info("dropped database", "database", name)
	}
	d.created = nil
	return errors.Join(errs...)
}

// redactMySQL shows an admin DSN without its password. One that does not
// parse has everything before its last '@' hidden: better too much than
// a password. It is not pkg/drivers/mysql's Redact because that package
// brings the SQLite driver with it (snapshots are SQLite files), which
// test/kube's module, using this harness, does not otherwise build.
func redactMySQL(dsn string) string {
	cfg, err := gomysql.ParseDSN(strings.TrimPrefix(dsn, "mysql://"))
	if err != nil {
		if at := strings.LastIndexByte(dsn, '@'); at >= 0 {
			return "xxxxx" + dsn[at:]
		}
		return dsn
	}
	if cfg.Passwd == "" {
		return dsn
	}
	return strings.Replace(dsn, cfg.User+":"+cfg.Passwd+"@", cfg.User+":xxxxx@", 1)
}
