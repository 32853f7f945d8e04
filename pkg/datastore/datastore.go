// Package datastore turns a --datastore-endpoint (k3s's flag) into the
// storage a kite server runs on. It is the one place that knows every
// driver: pkg/server and pkg/mvcc see only an mvcc.Backend.
//
//	""  or sqlite://PATH           embedded SQLite (PATH, or kite.db in the data dir)
//	postgres://... postgresql://... several kite servers on one Postgres database
//	mysql://...                     several kite servers on one MySQL or MariaDB database
//	raftsql                         a member of a raft cluster (Config.Raft), each
//	                                member with its own SQLite in the data dir
package datastore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/kite-db/kite/pkg/drivers/mysql"
	"github.com/kite-db/kite/pkg/drivers/postgres"
	"github.com/kite-db/kite/pkg/drivers/raftsql"
	"github.com/kite-db/kite/pkg/drivers/sqlite"
	"github.com/kite-db/kite/pkg/mvcc"
	"github.com/kite-db/kite/pkg/mvcc/memtail"
)

// Kinds of storage.
const (
	KindSQLite   = "sqlite"
	KindPostgres = "postgres"
	KindMySQL    = "mysql"
	KindRaftSQL  = "raftsql"
)

// Config says where the data lives and how to reach it.
type Config struct {
	// Endpoint is the --datastore-endpoint URL ("" for SQLite in DataDir).
	Endpoint string
	// DataDir holds kite.db when Endpoint is empty.
	DataDir string
	// Pool settings of a database server (k3s's --datastore-max-open-connections,
	// --datastore-max-idle-connections, --datastore-connection-max-lifetime);
	// zero takes the driver's default.
	MaxOpenConns    int
	MaxIdleConns    int
	ConnMaxLifetime time.Duration
	// WakeListen is where a server on MySQL takes the other servers'
	// wake-ups (--datastore-wake-listen; "" for the driver's default).
	WakeListen string
	// Raft is the member's bootstrap in raftsql mode (etcd's
	// --initial-cluster and the other peer flags); it selects raftsql.
	Raft *raftsql.Config
	// SQLite tunes the SQLite databases of the sqlite and raftsql kinds
	// (page caches and mappings, from --memory-budget); its Logger is set
	// by Open.
	SQLite sqlite.Options
	// LogCommit makes kite's own log the commit point in sqlite mode
	// (--experimental-sqlite-log-commit, see openSQLite). raftsql, whose
	// WAL is the commit point, applies behind it when Raft.ApplyBehind
	// says so (--raft-apply-behind).
	LogCommit bool
	// RowCacheBytes bounds the writer's cache of the newest rows applied
	// behind a log, in either mode (memtail.Options.RowCacheBytes; 0:
	// memtail's default).
	RowCacheBytes int64
	Logger        *slog.Logger
}

// Kind returns the kind of storage an endpoint names, or an error for a
// scheme kite does not know. The error never shows a password.
func Kind(endpoint string) (string, error) {
	if endpoint == "" {
		return KindSQLite, nil
	}
	if endpoint == KindRaftSQL {
		return KindRaftSQL, nil
	}
	scheme, _, ok := strings.Cut(endpoint, "://")
	if !ok {
		return "", fmt.Errorf("datastore endpoint %q: want sqlite://PATH, postgres://..., mysql://... or raftsql", Redact(endpoint))
	}
	switch strings.ToLower(scheme) {
	case "sqlite":
		return KindSQLite, nil
	case "postgres", "postgresql":
		return KindPostgres, nil
	case "mysql":
		return KindMySQL, nil
	}
	return "", fmt.Errorf("datastore endpoint %q: unknown scheme %q (want sqlite, postgres or mysql)", Redact(endpoint), scheme)
}

// SQLitePath returns the database file of a SQLite endpoint.
func SQLitePath(endpoint, dataDir string) string {
	if p, ok := strings.CutPrefix(endpoint, "sqlite://"); ok && p != "" {
		return p
	}
	return filepath.Join(dataDir, "kite.db")
}

// Redact hides the password of a URL-shaped endpoint and of a key=value
// connection string's password setting.
func Redact(endpoint string) string {
	if strings.HasPrefix(strings.ToLower(endpoint), "mysql://") {
		return mysql.Redact(endpoint)
	}
	if u, err := url.Parse(endpoint); err == nil && u.Scheme != "" && u.Opaque == "" {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
		q := u.Query()
		if q.Has("password") {
			q.Set("password", "xxxxx")
			u.RawQuery = q.Encode()
		}
		return u.String()
	}
	// Not parseable as a URL: show the scheme only, as the rest may hold
	// anything.
	if scheme, _, ok := strings.Cut(endpoint, "://"); ok {
		return scheme + "://..."
	}
	return "..."
}

// retryLogEvery spaces the log lines of an open that keeps failing.
const retryLogEvery = 5 * time.Second

// Open opens the storage. A database server that cannot be reached is
// retried with backoff (1 s doubling to 10 s) until ctx ends, with a log
// line every few seconds saying why; kite never serves a half-open store.
// A SQLite file is opened once: its errors are not transient.
func Open(ctx context.Context, cfg Config) (mvcc.Backend, error) {
	kind, err := Kind(cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Raft != nil && kind != KindRaftSQL && cfg.Endpoint != "" {
		return nil, fmt.Errorf("datastore endpoint %s and raft peer flags (--initial-cluster, --listen-peer-urls) select two storages; raftsql keeps its SQLite in the data dir", Redact(cfg.Endpoint))
	}
	if cfg.Raft != nil || kind == KindRaftSQL {
		rc := raftsql.Config{}
		if cfg.Raft != nil {
			rc = *cfg.Raft
		}
		rc.DataDir, rc.Logger, rc.SQLite = cfg.DataDir, log, cfg.SQLite
		rc.RowCacheBytes = cfg.RowCacheBytes
		n, err := raftsql.Open(ctx, rc)
		if err != nil {
			return nil, fmt.Errorf("open raftsql member: %w", err)
		}
		return n, nil
	}
	if kind == KindSQLite {
		var tail *memtail.Options
		if cfg.LogCommit {
			tail = &memtail.Options{RowCacheBytes: cfg.RowCacheBytes}
		}
		return openSQLite(ctx, log, SQLitePath(cfg.Endpoint, cfg.DataDir), cfg.SQLite, tail)
	}
	if kind == KindMySQL {
		// A malformed DSN is not worth retrying.
		if _, err := mysql.ParseDSN(cfg.Endpoint); err != nil {
			return nil, fmt.Errorf("datastore endpoint %s: %w", Redact(cfg.Endpoint), err)
		}
		opts := mysql.Options{Logger: log, MaxOpenConns: cfg.MaxOpenConns,
			MaxIdleConns: cfg.MaxIdleConns, ConnMaxLifetime: cfg.ConnMaxLifetime, WakeListen: cfg.WakeListen}
		return openRetrying(ctx, log, cfg.Endpoint, func() (mvcc.Backend, error) {
			return mysql.Open(ctx, cfg.Endpoint, opts)
		})
	}
	// A malformed connection string is not worth retrying.
	if _, err := pgx.ParseConfig(cfg.Endpoint); err != nil {
		return nil, fmt.Errorf("datastore endpoint %s: %w", Redact(cfg.Endpoint), err)
	}
	opts := postgres.Options{Logger: log, MaxOpenConns: cfg.MaxOpenConns,
		MaxIdleConns: cfg.MaxIdleConns, ConnMaxLifetime: cfg.ConnMaxLifetime}
	return openRetrying(ctx, log, cfg.Endpoint, func() (mvcc.Backend, error) {
		return postgres.Open(ctx, cfg.Endpoint, opts)
	})
}

// openSQLite opens the embedded SQLite mode. With tail (LogCommit) the
// database at path sits behind a memtail, whose log (path + ".log", a directory)
// is the commit point: a write is acknowledged once the log has synced
// it, SQLite's commits are left unsynced and take many writes each, off
// the acknowledgement path, and SQLite is synced before the log is
// released. Without it every SQLite commit is synced, as before; a log
// left by an earlier run with it is applied first and removed, so no
// acknowledged write it holds is lost.
func openSQLite(ctx context.Context, log *slog.Logger, path string, opts sqlite.Options, tail *memtail.Options) (mvcc.Backend, error) {
	opts.Logger = log
	logDir := path + ".log"
	_, statErr := os.Stat(logDir)
	if tail == nil && errors.Is(statErr, os.ErrNotExist) {
		b, err := sqlite.Open(ctx, path, opts)
		if err != nil {
			return nil, fmt.Errorf("open sqlite datastore %s: %w", path, err)
		}
		return b, nil
	}
	unsynced := opts
	unsynced.NoCommitSync = true
	base, err := sqlite.Open(ctx, path, unsynced)
	if err != nil {
		return nil, fmt.Errorf("open sqlite datastore %s: %w", path, err)
	}
	tailOpts := memtail.Options{}
	if tail != nil {
		tailOpts = *tail
	}
	tailOpts.Logger, tailOpts.LogDir = log, logDir
	b, err := memtail.Open(ctx, base, tailOpts)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("open sqlite datastore %s: %w", path, err), base.Close())
	}
	if tail != nil {
		return b, nil
	}
	// Close applies the log, syncs the database and releases the log.
	if err := b.Close(); err != nil {
		return nil, fmt.Errorf("open sqlite datastore %s: apply the log of --experimental-sqlite-log-commit: %w", path, err)
	}
	if err := os.RemoveAll(logDir); err != nil {
		return nil, fmt.Errorf("open sqlite datastore %s: remove the applied log: %w", path, err)
	}
	log.Info("applied and removed the log an earlier run with --experimental-sqlite-log-commit left", "log", logDir)
	return openSQLite(ctx, log, path, opts, nil)
}

// openRetrying calls open until it succeeds, ctx ends, or it fails in a
// way only the operator can mend (a database the user may not create),
// with backoff and a log line every few seconds saying why.
func openRetrying(ctx context.Context, log *slog.Logger, endpoint string, open func() (mvcc.Backend, error)) (mvcc.Backend, error) {
	kind, _ := Kind(endpoint)
	backoff, lastLog := time.Second, time.Time{}
	for {
		b, err := open()
		if err == nil {
			return b, nil
		}
		if ctx.Err() != nil {
			return nil, errors.Join(fmt.Errorf("open %s datastore %s", kind, Redact(endpoint)), err)
		}
		if errors.Is(err, postgres.ErrDatabaseMissing) || errors.Is(err, mysql.ErrDatabaseMissing) {
			// Only the operator can help: said once, not retried.
			return nil, fmt.Errorf("open %s datastore %s: %w", kind, Redact(endpoint), err)
		}
		if time.Since(lastLog) >= retryLogEvery {
			switch {
			case errors.Is(err, mvcc.ErrHistoryLost):
				// Retried too: the operator's accept-history (or a
				// restore) lets this server start without a restart.
				log.Error("datastore refused: its history is behind what kite served; retrying", "endpoint", Redact(endpoint), "retry_in", backoff, "err", err)
			default:
				log.Warn("datastore not reachable; retrying", "endpoint", Redact(endpoint), "retry_in", backoff, "err", err)
			}
			lastLog = time.Now()
		}
		select {
		case <-ctx.Done():
			// The last failure says why (no such database, authentication),
			// which the deadline alone does not.
			return nil, errors.Join(fmt.Errorf("open %s datastore %s: %w", kind, Redact(endpoint), ctx.Err()), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}
