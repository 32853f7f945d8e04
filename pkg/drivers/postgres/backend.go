package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kite-db/kite/pkg/mvcc"
)

var (
	_ mvcc.Backend = (*Backend)(nil)
	_ mvcc.Shared  = (*Backend)(nil)
)

// Options tunes a Backend. Zero values take the defaults.
type Options struct {
	Logger *slog.Logger
	// MaxOpenConns bounds the connection pool (pgxpool MaxConns): read
	// transactions, GetLatest calls, the write transaction and maintenance
	// share it (10). The notification listener and the primary lock use one
	// dedicated connection each on top, so a Backend opens at most
	// MaxOpenConns+2 connections.
	MaxOpenConns int
	// MaxIdleConns is how many pool connections stay open through a quiet
	// period (pgxpool MinConns, at most MaxOpenConns; 2). pgxpool has no cap
	// on idle connections as database/sql does: a connection above this
	// floor closes after 30 idle minutes.
	MaxIdleConns int
	// ConnMaxLifetime replaces a pool connection once it is this old (1 h),
	// so server-side memory held by a long-lived backend process is freed.
	ConnMaxLifetime time.Duration
	// TempDir is where Snapshot writes its SQLite copy (os.TempDir()).
	TempDir string
	// ObserveCommit, if set, is given the duration of every write
	// transaction's COMMIT round trip, which returns once Postgres has
	// flushed (fsynced, with synchronous_commit on) its WAL: kite reports
	// it as etcd's disk commit and fsync latencies. It runs on the commit
	// path and must not block.
	ObserveCommit func(time.Duration)
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MaxOpenConns <= 0 {
		o.MaxOpenConns = 10
	}
	if o.MaxIdleConns <= 0 {
		o.MaxIdleConns = 2
	}
	o.MaxIdleConns = min(o.MaxIdleConns, o.MaxOpenConns)
	if o.ConnMaxLifetime <= 0 {
		o.ConnMaxLifetime = time.Hour
	}
	if o.TempDir == "" {
		o.TempDir = os.TempDir()
	}
	return o
}

// Backend is a kite revision log in a Postgres database, shared by every
// kite server pointed at that database.
type Backend struct {
	opts   Options
	log    *slog.Logger
	pool   *pgxpool.Pool
	q      *queries
	origin string

	// writeSem is the write mutex of this process, a channel so waiting for
	// it honours ctx; the revision row lock orders writers across processes.
	writeSem chan struct{}

	listener *listener
	primary  *primary

	// observeCommit is Options.ObserveCommit, replaceable while serving
	// (ObserveCommits).
	observeCommit atomic.Pointer[func(time.Duration)]

	// migrated is set once the schema is current: from then on every new
	// pool connection checks the timeline (history.go). lost is the error
	// everything is refused with once the history was found behind.
	migrated atomic.Bool
	lost     atomic.Pointer[error]

	closeMu sync.Mutex
	closed  atomic.Bool
}

// ObserveCommits replaces Options.ObserveCommit: a server that opened the
// Backend through a caller's function wires its metrics afterwards. nil
// stops the observation.
func (b *Backend) ObserveCommits(observe func(time.Duration)) {
	if observe == nil {
		b.observeCommit.Store(nil)
		return
	}
	b.observeCommit.Store(&observe)
}

// ListenStats reports the LISTEN connection: notifications of the other
// kite servers received, times the connection was lost and made again,
// and notices waiting for the Store.
func (b *Backend) ListenStats() (received, reconnects int64, queued int) {
	return b.listener.received.Load(), b.listener.reconnects.Load(), len(b.listener.ch)
}

// PoolStats reports the connection pool (pgxpool's Stat): connections in
// use, idle, open and the maximum, and the acquires so far, those that
// had to wait for a connection and their total wait.
func (b *Backend) PoolStats() (acquired, idle, total, maxConns int32, acquires, waited int64, waitTime time.Duration) {
	st := b.pool.Stat()
	return st.AcquiredConns(), st.IdleConns(), st.TotalConns(), st.MaxConns(),
		st.AcquireCount(), st.EmptyAcquireCount(), st.AcquireDuration()
}

// Connection roles, the middle part of every connection's application_name
// ("kite:listen:<origin>"), so that an operator (or a test) can tell a
// server's connections apart in pg_stat_activity.
const (
	rolePool    = "pool"
	roleListen  = "listen"
	rolePrimary = "primary"
)

// Open connects to the database at dsn (a postgres:// URL or key=value
// string), creating the database if it does not exist and the user may
// (createdb.go), creates or checks kite's schema, and starts listening for
// the other servers' commits before it returns.
func Open(ctx context.Context, dsn string, opts Options) (b *Backend, err error) {
	opts = opts.withDefaults()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// pgconn redacts the password in its own message; the DSN is not
		// repeated here.
		return nil, fmt.Errorf("open postgres: parse connection string: %w", err)
	}
	origin, err := newOrigin()
	if err != nil {
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	where := fmt.Sprintf("%s:%d/%s", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database)
	b = &Backend{
		opts:     opts,
		log:      opts.Logger.With("component", "postgres", "db", where, "origin", origin),
		q:        newQueries(),
		origin:   origin,
		writeSem: make(chan struct{}, 1),
	}
	b.ObserveCommits(opts.ObserveCommit)
	serverKeepalives(cfg.ConnConfig.RuntimeParams)
	appBase := cfg.ConnConfig.RuntimeParams["application_name"]
	if appBase == "" {
		appBase = "kite"
	}
	listenCfg := dedicated(cfg.ConnConfig, appName(appBase, roleListen, origin))
	primaryCfg := dedicated(cfg.ConnConfig, appName(appBase, rolePrimary, origin))
	cfg.ConnConfig.RuntimeParams["application_name"] = appName(appBase, rolePool, origin)
	cfg.MaxConns = int32(opts.MaxOpenConns)
	cfg.MinConns = int32(opts.MaxIdleConns)
	cfg.MaxConnLifetime = opts.ConnMaxLifetime
	cfg.MaxConnLifetimeJitter = opts.ConnMaxLifetime / 10
	cfg.AfterConnect = b.checkConn

	opened := b
	defer func() {
		if err != nil {
			err = errors.Join(err, opened.Close())
		}
	}()
	if b.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return nil, fmt.Errorf("open postgres %s: create pool: %w", where, err)
	}
	err = migrate(ctx, b.pool, b.log)
	if isMissingDatabase(err) {
		if err = createDatabase(ctx, cfg.ConnConfig, b.log); err == nil {
			err = migrate(ctx, b.pool, b.log)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("open postgres %s: %w", where, err)
	}
	b.migrated.Store(true)
	if err := b.checkHistory(ctx, b.pool); err != nil {
		return nil, fmt.Errorf("open postgres %s: %w", where, err)
	}
	if b.listener, err = startListener(ctx, listenCfg, origin, b.log); err != nil {
		return nil, fmt.Errorf("open postgres %s: %w", where, err)
	}
	b.primary = startPrimary(primaryCfg, b.log)
	b.log.Info("opened postgres backend", "max_conns", opts.MaxOpenConns, "min_conns", opts.MaxIdleConns)
	return b, nil
}

func appName(base, role, origin string) string {
	return base + ":" + role + ":" + origin
}

// serverKeepalives asks Postgres to probe the connection after 5 idle
// seconds, so it notices a vanished kite server within about 11 s rather
// than the operating system's hours. Until it does, a dead server's
// session keeps what it holds: the primary lock, or the revision row lock
// of a write transaction cut off mid-way, which stops every writer.
// Keepalives probe only an idle connection: when Postgres had sent data
// the vanished server never acknowledged (the answer to its last
// statement), TCP retransmits for many minutes instead, so
// tcp_user_timeout bounds that case the same (Postgres 12 and later on
// Linux; elsewhere the setting is accepted and ignored).
func serverKeepalives(params map[string]string) {
	params["tcp_keepalives_idle"] = "5"
	params["tcp_keepalives_interval"] = "2"
	params["tcp_keepalives_count"] = "3"
	params["tcp_user_timeout"] = "11000" // milliseconds
}

// dedicated is the configuration of a connection that lives outside the
// pool for the Backend's life and mostly waits. It also probes from our
// end: a listener on a dead network would otherwise wait forever for
// notifications that cannot come.
func dedicated(base *pgx.ConnConfig, name string) *pgx.ConnConfig {
	c := base.Copy()
	c.RuntimeParams["application_name"] = name
	d := &net.Dialer{KeepAliveConfig: net.KeepAliveConfig{
		Enable: true, Idle: 5 * time.Second, Interval: 2 * time.Second, Count: 3}}
	c.DialFunc = d.DialContext
	return c
}

// newOrigin is the random id that tells this Backend's notifications from
// the other servers'.
func newOrigin() (string, error) {
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return "", fmt.Errorf("generate origin id: %w", err)
	}
	return hex.EncodeToString(id[:]), nil
}

// Origin returns the random id of this Backend: it tags the Backend's
// notifications and ends the application_name of its connections
// ("kite:pool:<origin>", "kite:listen:<origin>", "kite:primary:<origin>";
// "kite" is replaced by the DSN's application_name if it sets one).
func (b *Backend) Origin() string { return b.origin }

// Notices implements mvcc.Shared.
func (b *Backend) Notices() <-chan mvcc.Notice { return b.listener.ch }

// Primary implements mvcc.Shared.
func (b *Backend) Primary() <-chan bool { return b.primary.ch }

// RenewLease implements mvcc.Shared: the renewal is recorded in the lease's
// row, where a revoking transaction checks it (writeTx.LeaseExpired), and
// announced to the other servers (sqlRenewLease).
func (b *Backend) RenewLease(ctx context.Context, id int64) error {
	if b.closed.Load() {
		return mvcc.ErrClosed
	}
	tag, err := b.pool.Exec(ctx, sqlRenewLease, id, notifyChannel, renewPayload(b.origin, id))
	if err != nil {
		return classify(fmt.Errorf("renew lease %d: %w", id, err))
	}
	if tag.RowsAffected() == 0 {
		return mvcc.ErrLeaseNotFound
	}
	return nil
}

func (b *Backend) lockWriter(ctx context.Context) error {
	select {
	case b.writeSem <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("wait for writer: %w", ctx.Err())
	}
	if b.closed.Load() {
		<-b.writeSem
		return mvcc.ErrClosed
	}
	return nil
}

func (b *Backend) unlockWriter() { <-b.writeSem }

// Close stops the listener and the primary lock (releasing it) and closes
// the pool. Transactions must be finished first: the pool waits for its
// connections to come back. It is safe to call more than once.
func (b *Backend) Close() error {
	b.closeMu.Lock()
	defer b.closeMu.Unlock()
	if b.closed.Swap(true) {
		return nil
	}
	if b.listener != nil {
		b.listener.close()
	}
	if b.primary != nil {
		b.primary.close()
	}
	if b.pool != nil {
		b.pool.Close()
	}
	b.log.Info("closed postgres backend")
	return nil
}
