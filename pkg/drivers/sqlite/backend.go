// Package sqlite stores kite's revision log in an embedded SQLite database
// (modernc.org/sqlite, no cgo).
//
// One pinned writer connection runs every write transaction with statements
// prepared once for the Backend's life; a pool of query_only connections
// serves read transactions. In WAL mode readers see the last committed state
// and are never blocked by the writer. synchronous=FULL makes every commit
// fsync the WAL, so an acknowledged write survives power loss.
package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kite-db/kite/pkg/mvcc"

	modernc "modernc.org/sqlite" // also registers the "sqlite" database/sql driver
)

var _ mvcc.Backend = (*Backend)(nil)

// Options tunes a Backend. Zero values take the defaults.
type Options struct {
	Logger *slog.Logger
	// BusyTimeout is how long a connection waits for a lock held by another
	// process (a kite snapshot tool, sqlite3 shell) before failing (5 s).
	BusyTimeout time.Duration
	// ReadConns bounds the read pool, i.e. concurrent read transactions (4).
	ReadConns int
	// CacheSizeKiB is the page cache of each read connection (SQLite's
	// 2000 KiB when 0).
	CacheSizeKiB int
	// WriterCacheSizeKiB is the writer's page cache (8 MiB when 0).
	WriterCacheSizeKiB int
	// MmapBytes is how much of the database file each read connection maps
	// (1 GiB when 0; negative: none). See openReaders for why readers map
	// and what it costs in resident memory.
	MmapBytes int64
	// WriterMmapBytes is the writer's mapping (none when 0).
	WriterMmapBytes int64
	// NoCommitSync leaves commits unsynced (synchronous=NORMAL): a crash of
	// the process loses nothing, a crash of the machine may lose the last
	// commits. For a caller that keeps its own durable log of the writes
	// (raftsql's WAL, replayed from the applied index) and calls Sync
	// before it drops any of that log.
	NoCommitSync bool
	// ObserveCommit, if set, is given the duration of every write
	// transaction's COMMIT (the WAL append and, unless NoCommitSync, its
	// fsync): kite reports it as etcd's disk commit and fsync latencies.
	// It runs on the commit path and must not block.
	ObserveCommit func(time.Duration)
	// CheckpointInterval is the least time between two background copies
	// of the WAL into the database file (100 ms when 0). A caller that
	// commits rarely and large (memtail's flush behind raftsql's WAL)
	// gives a longer one, so that the pages each flush rewrites (the
	// B-trees' inner pages, the log's last leaf) are copied once for many
	// flushes.
	CheckpointInterval time.Duration
	// MaxChangesPerRevision, when positive, lowers the most changes one
	// revision may hold below the schema's bound (1,048,576, ids.go): a
	// request that changes more fails with mvcc.ErrTooManyChanges and
	// changes nothing. Tests set it (the kite binary only in a -tags
	// kitetest build) to reach the bound without a million keys; every
	// member of a raftsql cluster must then use the same value, as the
	// bound decides a committed request's outcome.
	MaxChangesPerRevision int64
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.BusyTimeout <= 0 {
		o.BusyTimeout = 5 * time.Second
	}
	if o.ReadConns <= 0 {
		o.ReadConns = 4
	}
	if o.MmapBytes == 0 {
		o.MmapBytes = defaultMmapBytes
	}
	if o.WriterCacheSizeKiB <= 0 {
		o.WriterCacheSizeKiB = defaultWriterCacheKiB
	}
	if o.CheckpointInterval <= 0 {
		o.CheckpointInterval = defaultCheckpointInterval
	}
	return o
}

// Backend is a kite revision log in one SQLite file.
type Backend struct {
	path string
	opts Options
	log  *slog.Logger
	defs []string // the SQL of every statement, by stmtID

	wdb    *sql.DB
	wconn  *sql.Conn   // pinned: the only connection that writes
	wstmts []*sql.Stmt // every statement, prepared on wconn

	// idx is the log's index by key (keyindex.go), built in Open.
	idx *keyIndex
	// committed is the current revision as of the last commit: where
	// GetLatest asks the key index first.
	committed atomic.Int64
	// leased is the table leased as the writer sees it, key to lease, so
	// that a put of a key without a lease looks there only when the key had
	// one. Only the writer, holding writeSem, uses it.
	leased map[string]int64

	// rdb holds the read connections: ReadConns of them are pinned in
	// readers (each with its statements prepared once), one more serves
	// Size.
	rdb     *sql.DB
	readers *readPool   // idle pinned read connections
	rconns  []*readConn // all of them, for Close

	// writeSem is the write mutex, a channel so that waiting for it honours
	// ctx. BeginWrite takes it and Commit/Rollback give it back; Defragment
	// holds it while it uses wconn. Close does not take it: transactions
	// must be finished before Close.
	writeSem chan struct{}

	ckpt *checkpointer

	// observeCommit is Options.ObserveCommit, replaceable while serving
	// (ObserveCommits).
	observeCommit atomic.Pointer[func(time.Duration)]

	// writeFault fails the next Put or Delete in a kitetest build
	// (FailNextWrite); in a release build it is empty.
	writeFault writeFault

	closeMu sync.Mutex
	closed  atomic.Bool
}

// Open opens or creates the database file at path.
func Open(ctx context.Context, path string, opts Options) (b *Backend, err error) {
	opts = opts.withDefaults()
	// modernc splits the DSN at the first '?', so such a path would be cut.
	if strings.ContainsRune(path, '?') {
		return nil, fmt.Errorf("open sqlite %q: path must not contain '?'", path)
	}
	// Commit with fdatasync(2), as SQLite's own Linux builds do (modernc's
	// transpile defaults to fsync). It writes the data and the metadata
	// needed to read it back, the file size included, so a commit is as
	// durable; it skips the timestamp update that fsync pushes through the
	// ext4 journal on every commit. etcd's WAL syncs the same way. The
	// setting is process-wide in modernc; where the platform has no
	// fdatasync it stays fsync.
	_, _ = modernc.Fdatasync(true)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("open sqlite %q: create directory: %w", path, err)
	}
	b = &Backend{
		path:     path,
		opts:     opts,
		log:      opts.Logger.With("component", "sqlite", "path", path),
		defs:     statements(),
		writeSem: make(chan struct{}, 1),
	}
	b.ObserveCommits(opts.ObserveCommit)
	// Every error return below sets b to nil: close what was opened through
	// a copy of the pointer.
	opened := b
	defer func() {
		if err != nil {
			err = errors.Join(err, opened.Close())
		}
	}()
	if err := b.openWriter(ctx, opts); err != nil {
		return nil, fmt.Errorf("open sqlite %q: %w", path, err)
	}
	if err := b.openReaders(ctx, opts); err != nil {
		return nil, fmt.Errorf("open sqlite %q: %w", path, err)
	}
	if b.ckpt, err = startCheckpointer(ctx, b.path, opts, b.log); err != nil {
		return nil, fmt.Errorf("open sqlite %q: %w", path, err)
	}
	b.log.Info("opened sqlite backend", "read_conns", opts.ReadConns)
	return b, nil
}

// dsn sets pragmas through _pragma so database/sql applies them to every
// connection it opens, including ones it replaces later.
func dsn(path string, opts Options, pragmas ...string) string {
	q := []string{fmt.Sprintf("_pragma=busy_timeout(%d)", opts.BusyTimeout.Milliseconds())}
	for _, p := range pragmas {
		q = append(q, "_pragma="+p)
	}
	return path + "?" + strings.Join(q, "&")
}

func (b *Backend) openWriter(ctx context.Context, opts Options) error {
	var err error
	// journal_size_limit trims the WAL after a checkpoint, so a burst of
	// writes does not leave a large -wal file behind for good.
	//
	// Checkpoints run on a connection of their own (checkpoint.go), off the
	// commit path; wal_autocheckpoint stays on as a bound on the WAL should
	// that connection fall behind.
	sync := "synchronous(FULL)"
	if opts.NoCommitSync {
		sync = "synchronous(NORMAL)"
	}
	b.wdb, err = sql.Open("sqlite", dsn(b.path, opts,
		"journal_mode(WAL)", sync, "journal_size_limit(67108864)",
		fmt.Sprintf("wal_autocheckpoint(%d)", fallbackCheckpointPages),
		fmt.Sprintf("mmap_size(%d)", max(opts.WriterMmapBytes, 0)),
		fmt.Sprintf("cache_size(-%d)", opts.WriterCacheSizeKiB)))
	if err != nil {
		return fmt.Errorf("open writer: %w", err)
	}
	b.wdb.SetMaxOpenConns(1)
	b.wdb.SetMaxIdleConns(1)
	b.wdb.SetConnMaxLifetime(0)
	b.wdb.SetConnMaxIdleTime(0)
	if b.wconn, err = b.wdb.Conn(ctx); err != nil {
		return fmt.Errorf("connect writer: %w", err)
	}
	var mode string
	if err := b.wconn.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return fmt.Errorf("read journal mode: %w", err)
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("journal mode is %q, want wal", mode)
	}
	if err := migrate(ctx, b.wconn); err != nil {
		return err
	}
	if b.idx, err = loadKeyIndex(ctx, b.wconn); err != nil {
		return err
	}
	if err := b.loadWriterState(ctx); err != nil {
		return err
	}
	b.wstmts = make([]*sql.Stmt, numStmts)
	for id, st := range b.defs {
		if b.wstmts[id], err = b.wconn.PrepareContext(ctx, st); err != nil {
			return fmt.Errorf("prepare writer statement %d: %w", id, err)
		}
	}
	return nil
}

// loadWriterState reads what the writer keeps in memory besides the key
// index: the committed revision and the leased keys.
func (b *Backend) loadWriterState(ctx context.Context) error {
	var current int64
	if err := b.wconn.QueryRowContext(ctx, `SELECT value FROM meta WHERE name = 'current'`).Scan(&current); err != nil {
		return fmt.Errorf("read current revision: %w", err)
	}
	b.committed.Store(current)
	rows, err := b.wconn.QueryContext(ctx, b.defs[qLeasedKeys])
	if err != nil {
		return fmt.Errorf("read lease keys: %w", err)
	}
	defer rows.Close()
	b.leased = map[string]int64{}
	for rows.Next() {
		var (
			key   []byte
			lease int64
		)
		if err := rows.Scan(&key, &lease); err != nil {
			return fmt.Errorf("read lease keys: %w", err)
		}
		b.leased[string(key)] = lease
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read lease keys: %w", err)
	}
	return nil
}

// openReaders opens the read pool after the writer, so the file already is
// in WAL mode and has its schema. query_only turns a stray write on a read
// transaction into an error instead of a lock fight with the writer.
//
// Each read connection is pinned for the Backend's life with every read
// statement prepared on it, and BEGIN/ROLLBACK are plain statements, as on
// the writer: a database/sql Tx would rebind the statements to its
// connection for every transaction. mmap lets readers take pages of the
// database file straight from the OS page cache: SQLite drops a
// connection's own page cache whenever another connection commits, so
// under writes every read would otherwise be a pread per page.
func (b *Backend) openReaders(ctx context.Context, opts Options) error {
	var err error
	pragmas := []string{"query_only(1)", fmt.Sprintf("mmap_size(%d)", max(opts.MmapBytes, 0))}
	if opts.CacheSizeKiB > 0 {
		pragmas = append(pragmas, fmt.Sprintf("cache_size(-%d)", opts.CacheSizeKiB))
	}
	b.rdb, err = sql.Open("sqlite", dsn(b.path, opts, pragmas...))
	if err != nil {
		return fmt.Errorf("open read pool: %w", err)
	}
	b.rdb.SetMaxOpenConns(opts.ReadConns + 1)
	b.rdb.SetMaxIdleConns(opts.ReadConns + 1)
	b.rdb.SetConnMaxLifetime(0)
	b.rdb.SetConnMaxIdleTime(0)
	b.readers = newReadPool(opts.ReadConns)
	for range opts.ReadConns {
		rc, err := b.openReadConn(ctx)
		if err != nil {
			return err
		}
		b.rconns = append(b.rconns, rc)
		b.readers.put(rc)
	}
	return nil
}

// Defaults of Options.
const (
	defaultMmapBytes      = 1 << 30
	defaultWriterCacheKiB = 8 << 10
)

// readConn is one pinned read connection and its prepared statements.
type readConn struct {
	conn            *sql.Conn
	stmts           []*sql.Stmt // read statements by stmtID, then begin and rollback
	begin, rollback *sql.Stmt
	// getLatest is qGetLatest prepared on the driver connection, used only
	// inside conn.Raw (GetLatest).
	getLatest driverStmt
}

// driverStmt is what GetLatest needs of a modernc prepared statement.
type driverStmt interface {
	driver.StmtQueryContext
	Close() error
}

func (b *Backend) openReadConn(ctx context.Context) (*readConn, error) {
	conn, err := b.rdb.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("connect reader: %w", err)
	}
	rc := &readConn{conn: conn, stmts: make([]*sql.Stmt, firstWrite)}
	for id, st := range b.defs[:firstWrite] {
		if rc.stmts[id], err = conn.PrepareContext(ctx, st); err != nil {
			return nil, errors.Join(fmt.Errorf("prepare read statement %d: %w", id, err), rc.close())
		}
	}
	if rc.begin, err = conn.PrepareContext(ctx, "BEGIN"); err != nil {
		return nil, errors.Join(fmt.Errorf("prepare read begin: %w", err), rc.close())
	}
	if rc.rollback, err = conn.PrepareContext(ctx, "ROLLBACK"); err != nil {
		return nil, errors.Join(fmt.Errorf("prepare read rollback: %w", err), rc.close())
	}
	err = conn.Raw(func(dc any) error {
		pc, ok := dc.(driver.ConnPrepareContext)
		if !ok {
			return fmt.Errorf("driver connection %T cannot prepare with a context", dc)
		}
		st, err := pc.PrepareContext(ctx, b.defs[qGetLatest])
		if err != nil {
			return err
		}
		if rc.getLatest, ok = st.(driverStmt); !ok {
			return errors.Join(fmt.Errorf("driver statement %T cannot query with a context", st), st.Close())
		}
		return nil
	})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("prepare get latest: %w", err), rc.close())
	}
	return rc, nil
}

func (rc *readConn) close() error {
	var errs []error
	if rc.getLatest != nil {
		errs = append(errs, rc.conn.Raw(func(any) error { return rc.getLatest.Close() }))
	}
	for _, s := range append(rc.stmts, rc.begin, rc.rollback) {
		if s != nil {
			errs = append(errs, s.Close())
		}
	}
	errs = append(errs, rc.conn.Close())
	return errors.Join(errs...)
}

// Path returns the database file.
func (b *Backend) Path() string { return b.path }

// BeginRead starts a read transaction on a pinned read connection. SQLite's
// BEGIN is deferred: the snapshot is taken at the first read, so BeginRead
// reads the revisions and the applied index at once to pin the snapshot to
// this moment, and keeps them: Revisions and AppliedIndex of a read
// transaction answer without another query.
func (b *Backend) BeginRead(ctx context.Context) (mvcc.ReadTx, error) {
	return b.BeginAppliedRead(ctx) // a nil AppliedReadTx converts to a nil ReadTx
}

// BeginAppliedRead is BeginRead, typed to tell the applied index its
// snapshot holds (memtail.Base).
func (b *Backend) BeginAppliedRead(ctx context.Context) (mvcc.AppliedReadTx, error) {
	tx, err := b.beginRead(ctx)
	if err != nil {
		return nil, err // not a nil *readTx in a non-nil interface
	}
	return tx, nil
}

func (b *Backend) beginRead(ctx context.Context) (*readTx, error) {
	if b.closed.Load() {
		return nil, mvcc.ErrClosed
	}
	rc, err := b.readers.get(ctx)
	if err != nil {
		return nil, fmt.Errorf("begin read: wait for connection: %w", err)
	}
	// Registered before the snapshot is taken: rows a compaction removes
	// after this stay in the key index until Rollback.
	gen := b.idx.beginRead()
	// The transaction outlives the ctx of this call: the caller ends it with
	// Rollback, and each read honours its own ctx.
	if _, err := rc.begin.ExecContext(context.WithoutCancel(ctx)); err != nil {
		b.idx.endRead(gen)
		b.readers.put(rc)
		return nil, fmt.Errorf("begin read: %w", err)
	}
	r := &readTx{reader: reader{stmts: rc.stmts, idx: b.idx}, rc: rc, b: b, gen: gen}
	var applied int64
	if err := r.queryRow(ctx, true, qSnapshotState, []any{&r.current, &r.compacted, &applied}); err != nil {
		return nil, errors.Join(fmt.Errorf("begin read: %w", r.fail("read revisions", err)), r.Rollback())
	}
	r.applied = uint64(applied)
	r.latest = r.current
	return r, nil
}

// BeginWrite takes the write mutex and starts a transaction on the writer
// connection. The mutex is held until Commit or Rollback.
func (b *Backend) BeginWrite(ctx context.Context) (mvcc.WriteTx, error) {
	return b.BeginAppliedWrite(ctx) // a nil AppliedWriteTx converts to a nil WriteTx
}

// BeginAppliedWrite is BeginWrite, typed to record the applied index
// (raftsql, memtail.Base).
func (b *Backend) BeginAppliedWrite(ctx context.Context) (mvcc.AppliedWriteTx, error) {
	tx, err := b.beginWrite(ctx)
	if err != nil {
		return nil, err // not a nil *writeTx in a non-nil interface
	}
	return tx, nil
}

func (b *Backend) beginWrite(ctx context.Context) (*writeTx, error) {
	if err := b.lockWriter(ctx); err != nil {
		return nil, fmt.Errorf("begin write: %w", err)
	}
	if _, err := b.wstmts[qBegin].ExecContext(ctx); err != nil {
		b.unlockWriter()
		return nil, fmt.Errorf("begin write: %w", err)
	}
	w := &writeTx{reader: reader{stmts: b.wstmts, idx: b.idx, sticky: true}, b: b}
	var err error
	if w.current, w.compacted, err = w.reader.Revisions(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("begin write: %w", err), w.Rollback())
	}
	w.latest = w.current
	return w, nil
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

// Close closes the statements, the writer and the read pool. It is safe to
// call more than once.
func (b *Backend) Close() error {
	b.closeMu.Lock()
	defer b.closeMu.Unlock()
	if b.closed.Swap(true) {
		return nil
	}
	var errs []error
	if b.ckpt != nil {
		errs = append(errs, b.ckpt.close())
	}
	for _, s := range b.wstmts {
		if s != nil {
			errs = append(errs, s.Close())
		}
	}
	for _, rc := range b.rconns {
		errs = append(errs, rc.close())
	}
	if b.wconn != nil {
		errs = append(errs, b.wconn.Close())
	}
	for _, db := range []*sql.DB{b.rdb, b.wdb} {
		if db != nil {
			errs = append(errs, db.Close())
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close sqlite %q: %w", b.path, err)
	}
	b.log.Info("closed sqlite backend")
	return nil
}

// replaceReadConn swaps a broken pinned read connection for a new one.
func (b *Backend) replaceReadConn(old, rc *readConn) {
	b.closeMu.Lock()
	for i, c := range b.rconns {
		if c == old {
			b.rconns[i] = rc
		}
	}
	b.closeMu.Unlock()
	_ = old.close()
	b.readers.put(rc)
}

// AppliedIndex returns the last raft entry a transaction recorded with
// SetAppliedIndex (0 if none): where a raftsql node replays its log from.
func (b *Backend) AppliedIndex(ctx context.Context) (uint64, error) {
	tx, err := b.beginRead(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	return tx.AppliedIndex(ctx)
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

// Sync makes every commit so far durable, for a Backend opened with
// NoCommitSync: committed transactions are in the -wal file (or, once
// checkpointed, in the database file, which a checkpoint syncs before it
// lets the WAL be reused), so syncing both files is enough.
func (b *Backend) Sync() error {
	for _, p := range []string{b.path + "-wal", b.path} {
		f, err := os.Open(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("sync %s: %w", p, err)
		}
		err = f.Sync()
		f.Close()
		if err != nil {
			return fmt.Errorf("sync %s: %w", p, err)
		}
	}
	return nil
}
