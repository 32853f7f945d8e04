package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/kite-db/kite/pkg/mvcc"
)

var (
	_ mvcc.Backend = (*Backend)(nil)
	_ mvcc.Shared  = (*Backend)(nil)
)

// Options tunes a Backend. Zero values take the defaults.
type Options struct {
	Logger *slog.Logger
	// MaxOpenConns bounds the connection pool: read transactions,
	// GetLatest calls, the write transaction and maintenance share it (10).
	MaxOpenConns int
	// MaxIdleConns is how many connections stay open through a quiet
	// period (2, at most MaxOpenConns).
	MaxIdleConns int
	// ConnMaxLifetime replaces a connection once it is this old (1 h),
	// well inside the server's default wait_timeout of 8 h.
	ConnMaxLifetime time.Duration
	// TempDir is where Snapshot writes its SQLite copy (os.TempDir()).
	TempDir string
	// WakeListen is the TCP address where this server takes the other
	// servers' wake-ups (wake.go): host:port, port 0 for any
	// ("127.0.0.1:0"). The servers of one database must reach each other
	// there.
	WakeListen string
	// WakeAdvertise is the address the others dial ("": WakeListen's,
	// with a wildcard host replaced by this machine's name).
	WakeAdvertise string
	// ObserveCommit, if set, is given the duration of every write
	// transaction's COMMIT round trip, which returns once InnoDB has
	// flushed its redo log (innodb_flush_log_at_trx_commit=1): kite
	// reports it as etcd's disk commit and fsync latencies. It runs on the
	// commit path and must not block.
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
	if o.WakeListen == "" {
		o.WakeListen = "127.0.0.1:0"
	}
	return o
}

// Backend is a kite revision log in a MySQL or MariaDB database.
type Backend struct {
	opts Options
	log  *slog.Logger
	db   *sql.DB
	q    *queries
	// bg is a small pool of its own for the wake-ups' and the primary
	// lease's statements, so a busy main pool never delays a renewal of
	// the primary lease into a step-down.
	bg *sql.DB

	// dbName is the database's name, for the tablespace names Size reads;
	// sizeView is which view of them answers (maintenance.go), -1 none.
	dbName   string
	sizeView atomic.Int32
	// galera is set on a node of a Galera cluster (causalReads).
	galera bool
	// lost, once set, is the error everything is refused with: the
	// database's history is behind what kite served (failover.go).
	lost atomic.Pointer[error]

	// packet bounds a statement, from the server's max_allowed_packet
	// (write.go splits writes to fit).
	packet int

	// writeSem is the write mutex of this process, a channel so waiting
	// for it honours ctx; the revision row lock orders writers in the
	// database.
	writeSem chan struct{}

	observeCommit atomic.Pointer[func(time.Duration)]

	wake    *wake
	primary *primary

	closeMu sync.Mutex
	closed  atomic.Bool
}

// ObserveCommits replaces Options.ObserveCommit. nil stops the
// observation.
func (b *Backend) ObserveCommits(observe func(time.Duration)) {
	if observe == nil {
		b.observeCommit.Store(nil)
		return
	}
	b.observeCommit.Store(&observe)
}

// Open connects to the database at dsn (see ParseDSN), creating it if it
// does not exist and the user may (createdb.go), checks that the server is
// one kite can run on, creates or migrates kite's schema, and joins the
// other kite servers of the database: it connects to each for wake-ups
// (wake.go) and competes for the primary lease (primary.go).
func Open(ctx context.Context, dsn string, opts Options) (b *Backend, err error) {
	opts = opts.withDefaults()
	cfg, err := ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("open mysql: %w", err)
	}
	where := cfg.Net + "(" + cfg.Addr + ")/" + cfg.DBName
	b = &Backend{
		opts:     opts,
		log:      opts.Logger.With("component", "mysql", "db", where),
		q:        newQueries(),
		writeSem: make(chan struct{}, 1),
		dbName:   cfg.DBName,
	}
	cfg.Logger = driverLogger{b.log}
	connector, err := gomysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("open mysql %s: %w", where, err)
	}
	b.ObserveCommits(opts.ObserveCommit)
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(opts.MaxOpenConns)
	db.SetMaxIdleConns(opts.MaxIdleConns)
	db.SetConnMaxLifetime(opts.ConnMaxLifetime)
	b.db = db
	// b is nil in this deferred call once an error is returned; the pool
	// is reached through own (causalReads may have replaced it).
	own := b
	defer func() {
		if err != nil {
			err = errors.Join(err, own.db.Close())
		}
	}()
	err = b.checkServer(ctx)
	if isMissingDatabase(err) {
		if err = createDatabase(ctx, cfg, b.log); err == nil {
			err = b.checkServer(ctx)
		}
	}
	if err != nil {
		return nil, classify(fmt.Errorf("open mysql %s: %w", where, err))
	}
	if galera, err := b.isGalera(ctx); err != nil {
		return nil, classify(fmt.Errorf("open mysql %s: %w", where, err))
	} else if galera {
		b.galera = true
		if connector, err = b.causalReads(cfg); err != nil {
			return nil, fmt.Errorf("open mysql %s: %w", where, err)
		}
	}
	if err := migrate(ctx, b.db, b.log); err != nil {
		return nil, classify(fmt.Errorf("open mysql %s: %w", where, err))
	}
	bg := sql.OpenDB(connector)
	bg.SetMaxOpenConns(2)
	bg.SetMaxIdleConns(2)
	bg.SetConnMaxLifetime(opts.ConnMaxLifetime)
	name := serverName()
	if b.wake, err = startWake(ctx, bg, name, opts.WakeListen, opts.WakeAdvertise, b.log); err != nil {
		return nil, classify(errors.Join(fmt.Errorf("open mysql %s: %w", where, err), bg.Close()))
	}
	b.bg = bg
	b.primary = startPrimary(bg, name, b.log)
	b.log.Info("opened mysql backend", "max_conns", opts.MaxOpenConns, "max_allowed_packet", b.packet)
	return b, nil
}

// checkServer reads what the server imposes on kite: the largest
// statement it accepts, and that commits are durable. A server that
// flushes its redo log only once a second (innodb_flush_log_at_trx_commit
// 0 or 2) can lose acknowledged writes in a crash: kite warns, and leaves
// the server's settings alone.
func (b *Backend) checkServer(ctx context.Context) error {
	var packet int64
	var flush string
	var version string
	err := b.db.QueryRowContext(ctx,
		`SELECT @@max_allowed_packet, @@innodb_flush_log_at_trx_commit, VERSION()`).Scan(&packet, &flush, &version)
	var me *gomysql.MySQLError
	if errors.As(err, &me) && me.Number == erUnknownSystemVariable {
		// Every DSN parameter the driver does not know is SET as a
		// session variable on each new connection (dsn.go).
		return fmt.Errorf("a DSN parameter is neither a driver parameter kite accepts nor a session variable of the server: %w", err)
	}
	if err != nil {
		return fmt.Errorf("read server settings: %w", err)
	}
	b.packet = int(packet)
	if flush != "1" {
		b.log.Warn("innodb_flush_log_at_trx_commit is not 1: a crash of the database server can lose acknowledged writes",
			"innodb_flush_log_at_trx_commit", flush)
	}
	b.log.Debug("database server", "version", version)
	return nil
}

// isGalera reports whether the server is a node of a Galera cluster
// (MariaDB Galera Cluster, Percona XtraDB Cluster) with replication on.
// MySQL without Galera has no wsrep_on variable.
func (b *Backend) isGalera(ctx context.Context) (bool, error) {
	var name, value string
	err := b.db.QueryRowContext(ctx, `SHOW VARIABLES LIKE 'wsrep_on'`).Scan(&name, &value)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("read wsrep_on: %w", err)
	}
	return strings.EqualFold(value, "ON"), nil
}

// causalReads makes every connection of a Galera node wait, before each
// read and each transaction's start, for the write sets the cluster
// ordered before it (wsrep_sync_wait=1): without it a read on this node
// could miss a revision another server committed through another node and
// acknowledged, or woke this server for, and the Store would take the
// node's lag for lost history. A DSN that sets wsrep_sync_wait itself is
// obeyed, with a warning if it leaves reads out. It replaces b.db and
// returns the connector the other pools use.
func (b *Backend) causalReads(cfg *gomysql.Config) (driver.Connector, error) {
	if v, ok := cfg.Params["wsrep_sync_wait"]; ok {
		if n, err := strconv.Atoi(v); err != nil || n&1 == 0 {
			b.log.Warn("Galera: the DSN's wsrep_sync_wait leaves reads out (bit 1 unset): reads through this node may miss writes committed through others, and kite's reads are then not linearizable", "wsrep_sync_wait", v)
		}
	} else {
		cfg = cfg.Clone()
		if cfg.Params == nil {
			cfg.Params = map[string]string{}
		}
		cfg.Params["wsrep_sync_wait"] = "1"
	}
	connector, err := gomysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	old := b.db
	b.db = sql.OpenDB(connector)
	b.db.SetMaxOpenConns(b.opts.MaxOpenConns)
	b.db.SetMaxIdleConns(b.opts.MaxIdleConns)
	b.db.SetConnMaxLifetime(b.opts.ConnMaxLifetime)
	_ = old.Close()
	b.log.Info("Galera node: every read waits for what the cluster committed before it (wsrep_sync_wait)")
	return connector, nil
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

// Close closes the connection pool. Transactions must be finished first.
// It is safe to call more than once.
func (b *Backend) Close() error {
	b.closeMu.Lock()
	defer b.closeMu.Unlock()
	if b.closed.Swap(true) {
		return nil
	}
	// The primary lease is released and this server leaves kite_server
	// before the pools close.
	b.primary.close()
	b.wake.close()
	if err := errors.Join(b.bg.Close(), b.db.Close()); err != nil {
		return fmt.Errorf("close mysql: %w", err)
	}
	b.log.Info("closed mysql backend")
	return nil
}

// Notices implements mvcc.Shared.
func (b *Backend) Notices() <-chan mvcc.Notice { return b.wake.ch }

// Primary implements mvcc.Shared.
func (b *Backend) Primary() <-chan bool { return b.primary.ch }

// RenewLease implements mvcc.Shared: the renewal is recorded in the lease's
// row, where a revoking transaction checks it (writeTx.LeaseExpired), then
// told to the other servers.
func (b *Backend) RenewLease(ctx context.Context, id int64) error {
	if b.closed.Load() {
		return mvcc.ErrClosed
	}
	res, err := b.db.ExecContext(ctx, sqlRenewLease, id)
	if err != nil {
		return classify(fmt.Errorf("renew lease %x: %w", id, err))
	}
	if n, err := res.RowsAffected(); err != nil {
		return classify(fmt.Errorf("renew lease %x: %w", id, err))
	} else if n == 0 {
		// No row, or (MySQL counts changed rows) a renewal in the same
		// microsecond as the last.
		if _, found, err := b.leaseRow(ctx, id); err != nil {
			return classify(fmt.Errorf("renew lease %x: %w", id, err))
		} else if !found {
			return mvcc.ErrLeaseNotFound
		}
	}
	b.wake.renewed(id)
	return nil
}

func (b *Backend) leaseRow(ctx context.Context, id int64) (ttl int64, found bool, err error) {
	err = b.db.QueryRowContext(ctx, sqlLease, id).Scan(&ttl)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	return ttl, err == nil, err
}

// ListenStats reports the wake-ups as kite's metrics show Postgres's
// LISTEN connection: commit wake-ups received from the other servers,
// connections made after start (each followed by a resync), and notices
// the Store has not taken yet.
func (b *Backend) ListenStats() (received, reconnects int64, queued int) {
	return b.wake.received.Load(), b.wake.reconnects.Load(), len(b.wake.ch)
}

// WakeStats reports the fallback: the polls made while a live server was
// unreachable, whether one is now, and how many servers this one has a
// wake-up connection with.
func (b *Backend) WakeStats() (polls int64, degraded bool, peers int) {
	return b.wake.polls.Load(), b.wake.degraded.Load(), b.wake.peers()
}

// driverLogger sends what go-sql-driver logs (connections it found broken,
// packets out of order) to the Backend's logger instead of its default,
// the standard error.
type driverLogger struct{ log *slog.Logger }

func (l driverLogger) Print(v ...any) { l.log.Warn("mysql driver: " + fmt.Sprint(v...)) }
