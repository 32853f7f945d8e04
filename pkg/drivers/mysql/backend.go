package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/kite-db/kite/pkg/mvcc"
)

var _ mvcc.Backend = (*Backend)(nil)

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
	return o
}

// Backend is a kite revision log in a MySQL or MariaDB database.
type Backend struct {
	opts Options
	log  *slog.Logger
	db   *sql.DB
	q    *queries

	// packet bounds a statement, from the server's max_allowed_packet
	// (write.go splits writes to fit).
	packet int

	// writeSem is the write mutex of this process, a channel so waiting
	// for it honours ctx; the revision row lock orders writers in the
	// database.
	writeSem chan struct{}

	observeCommit atomic.Pointer[func(time.Duration)]

	// exclusive holds the database's server lock (exclusive.go).
	exclusive *sql.Conn

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
// one kite can run on, creates or migrates kite's schema, and
// takes the database's server lock (exclusive.go): a second kite server on
// the same database gets ErrDatabaseInUse.
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
	defer func() {
		if err != nil {
			err = errors.Join(err, db.Close())
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
	if err := migrate(ctx, b.db, b.log); err != nil {
		return nil, classify(fmt.Errorf("open mysql %s: %w", where, err))
	}
	if err := b.lockExclusive(ctx); err != nil {
		return nil, classify(fmt.Errorf("open mysql %s: %w", where, err))
	}
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
	if b.exclusive != nil {
		// Closing the session frees the lock as well; the pool's Close
		// waits for the connection to come back.
		_ = b.exclusive.Close()
	}
	if err := b.db.Close(); err != nil {
		return fmt.Errorf("close mysql: %w", err)
	}
	b.log.Info("closed mysql backend")
	return nil
}

// driverLogger sends what go-sql-driver logs (connections it found broken,
// packets out of order) to the Backend's logger instead of its default,
// the standard error.
type driverLogger struct{ log *slog.Logger }

func (l driverLogger) Print(v ...any) { l.log.Warn("mysql driver: " + fmt.Sprint(v...)) }
