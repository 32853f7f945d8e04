package memtail

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/kite-db/kite/pkg/mvcc"
)

var _ mvcc.Backend = (*Backend)(nil)

// Base is the Backend memtail wraps (sqlite.Backend, which the packages
// that give one to memtail check at compile time): one that records, with
// the rows of a transaction, the applied index of the newest batch it
// holds, and tells it in every read.
type Base interface {
	mvcc.Backend
	// AppliedIndex is the index of the newest batch the base holds.
	AppliedIndex(ctx context.Context) (uint64, error)
	// BeginAppliedRead is BeginRead whose snapshot tells its applied
	// index: a read merges only the tail's batches after it.
	BeginAppliedRead(ctx context.Context) (mvcc.AppliedReadTx, error)
	// BeginAppliedWrite is BeginWrite that records the applied index with
	// the rows: a flush records its newest batch's.
	BeginAppliedWrite(ctx context.Context) (mvcc.AppliedWriteTx, error)
	// Sync makes every commit so far durable: the base's commits are left
	// unsynced (a log makes them durable), and a log is released only up
	// to what Sync made durable in the base.
	Sync() error
	// CheckChange returns the error a Put or Delete of change sub of
	// revision rev would fail with: a change the base would refuse at the
	// flush is refused when it is written into the tail.
	CheckChange(rev, sub int64) error
}

// Options tunes a Backend. Zero values take the defaults.
type Options struct {
	Logger *slog.Logger
	// FlushInterval is the most a committed batch waits in the tail
	// before it is flushed (100 ms, etcd's batch interval).
	FlushInterval time.Duration
	// FlushOps flushes the tail early once it holds this many ops (10,000,
	// etcd's batch limit), which bounds the memory the tail takes and the
	// work a read merges.
	FlushOps int
	// LogDir, if set, is where the log of committed batches lives: every
	// batch is synced to it before its commit returns, and a restart
	// replays from it what the base does not hold. Without it the tail is
	// durable only through the caller's own log (raftsql's WAL), and
	// Base's commits must be synced.
	LogDir string
	// ReleaseInterval is how often the base is synced so that the log
	// before it can be dropped (10 s).
	ReleaseInterval time.Duration
	// Numbered says the caller's own log numbers every batch it feeds
	// (SetAppliedIndex; raftsql's entries), with no LogDir: a batch
	// without an index is then the caller's maintenance, outside its log
	// (a physical compaction step, a Store's bootstrap), takes no number
	// and goes to the base directly, since the tail orders batches by
	// number.
	Numbered bool
	// FlushFailed, if set, is told of every flush that failed. A caller
	// whose log the tail replays can stop there, as etcd stops when its
	// backend cannot commit (raftsql stops the member; it replays the
	// entries after a restart); without it writes are refused until a
	// flush succeeds.
	FlushFailed func(error)
	// RowCacheBytes bounds the writer's cache of the newest rows of the
	// keys it touched last (16 MiB; kite passes its share of
	// --memory-budget, 16 MiB of the default; negative: no cache). It saves the
	// writer a read of the base for the row a put replaces or a delete
	// removes; the values it holds after their batch is flushed are
	// memory the tail would no longer keep, and the Go heap's growth
	// doubles them in the resident set.
	RowCacheBytes int64
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.FlushInterval <= 0 {
		o.FlushInterval = 100 * time.Millisecond
	}
	if o.FlushOps <= 0 {
		o.FlushOps = 10000
	}
	if o.ReleaseInterval <= 0 {
		o.ReleaseInterval = 10 * time.Second
	}
	switch {
	case o.RowCacheBytes == 0:
		o.RowCacheBytes = 16 << 20
	case o.RowCacheBytes < 0:
		o.RowCacheBytes = 0
	}
	return o
}

// Backend serves the wrapped Base's state with the tail over it.
type Backend struct {
	base Base
	opts Options
	log  *slog.Logger
	wal  *fileLog // nil without Options.LogDir

	// observe, if set, is given the duration of every log append with its
	// sync (kite reports it as etcd's WAL fsync and disk commit).
	observe atomic.Pointer[func(time.Duration)]

	// writeSem is the write mutex: one WriteTx at a time, as the Store
	// guarantees anyway, and never during Close.
	writeSem chan struct{}
	// rows and head are the writer's: only a holder of writeSem reads or
	// changes them. rows is the newest row of keys written or read
	// lately (rowcache.go); head, when known, the newest revisions.
	rows *rowCache
	head headRevisions
	// live knows which keys are certainly not live (livekeys.go); it is
	// the writer's too.
	live *liveKeys

	mu sync.Mutex // guards the fields below
	// tail holds the committed batches the base does not hold yet, oldest
	// first. It is replaced, never changed in place: a read keeps the
	// slice it took.
	tail      []*batch
	tailOps   int
	lastIndex uint64 // of the newest batch committed
	// flushed is the index of the newest batch in the base (not yet
	// synced there, unless released covers it).
	flushed, released uint64
	// failed is the first error of the log: a batch may be half in it,
	// so every later write fails with it until a restart reads the log
	// again (etcd stops on a failed WAL write).
	failed error
	// flushErr is the last flush's error, nil once one succeeds: writes
	// are refused while the tail cannot reach the base.
	flushErr error

	flushMu sync.Mutex // one flush at a time
	kick    chan struct{}
	stop    chan struct{}
	wg      sync.WaitGroup
	closed  bool
}

// Open wraps base and starts the flusher, which Close stops. With a log,
// the batches it holds after the base's applied index are replayed into
// the base first.
func Open(ctx context.Context, base Base, opts Options) (*Backend, error) {
	opts = opts.withDefaults()
	idx, err := base.AppliedIndex(ctx)
	if err != nil {
		return nil, fmt.Errorf("memtail: read applied index: %w", err)
	}
	b := &Backend{
		base: base, opts: opts, log: opts.Logger.With("component", "memtail"),
		writeSem:  make(chan struct{}, 1),
		rows:      newRowCache(opts.RowCacheBytes),
		lastIndex: idx, flushed: idx, released: idx,
		kick: make(chan struct{}, 1),
		stop: make(chan struct{}),
	}
	if opts.LogDir != "" && opts.Numbered {
		return nil, errors.New("memtail: a log of its own numbers its batches itself (Options.Numbered with LogDir)")
	}
	if opts.LogDir != "" {
		if err := b.replay(ctx, idx); err != nil {
			return nil, err
		}
	}
	if b.live, err = loadLiveKeys(ctx, base); err != nil {
		if b.wal != nil {
			err = errors.Join(err, b.wal.close())
		}
		return nil, err
	}
	b.wg.Add(1)
	go b.flushLoop()
	return b, nil
}

// replay opens the log and applies to the base the batches it holds after
// applied, in one flush.
func (b *Backend) replay(ctx context.Context, applied uint64) error {
	l, recs, err := openLog(b.log, b.opts.LogDir, applied)
	if err != nil {
		return err
	}
	b.wal = l
	for _, r := range recs {
		bt, err := decodeBatch(r.payload)
		if err != nil {
			return errors.Join(fmt.Errorf("memtail: log record %d: %w", r.index, err), l.close())
		}
		bt.index, b.lastIndex = r.index, r.index
		b.tail = append(b.tail, bt)
		b.tailOps += len(bt.ops)
	}
	if len(recs) > 0 {
		b.log.Info("replaying the log into the database", "from_index", applied+1, "to_index", b.lastIndex)
	}
	if err := b.flush(ctx); err != nil {
		return errors.Join(err, l.close())
	}
	return nil
}

// ObserveCommits makes observe see the duration of every log append with
// its sync: what a write waits for on disk.
func (b *Backend) ObserveCommits(observe func(time.Duration)) {
	if observe == nil {
		b.observe.Store(nil)
		return
	}
	b.observe.Store(&observe)
}

// logBatch makes bt durable in the log, if there is one.
func (b *Backend) logBatch(bt *batch) error {
	if b.wal == nil {
		return nil
	}
	start := time.Now()
	if err := b.wal.append(bt.index, encodeBatch(bt)); err != nil {
		if !errors.Is(err, errLogSpace) {
			b.fail(err)
		}
		if errors.Is(err, syscall.ENOSPC) {
			err = fmt.Errorf("%w: %w", mvcc.ErrDiskFull, err)
		}
		return err
	}
	if o := b.observe.Load(); o != nil {
		(*o)(time.Since(start))
	}
	return nil
}

// fail makes err sticky: every later write fails with it.
func (b *Backend) fail(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failed == nil {
		b.failed = err
	}
}

// snapshot returns the tail as it is now.
func (b *Backend) snapshot() []*batch {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.tail
}

// BeginRead implements mvcc.Backend.
func (b *Backend) BeginRead(ctx context.Context) (mvcc.ReadTx, error) {
	// The tail first, then the base: the base's state is then at least as
	// new as the flushes the tail reflects, so no batch falls in between.
	tail := b.snapshot()
	base, err := b.base.BeginAppliedRead(ctx)
	if err != nil || len(tail) == 0 {
		// Nothing pending when the read began: the base alone is a
		// committed state, if anything newer than that moment.
		return base, err
	}
	v, err := b.newView(ctx, base, tail)
	if err != nil {
		return nil, errors.Join(err, base.Rollback())
	}
	return v, nil
}

// newView merges over base the batches of tail it does not hold.
func (b *Backend) newView(ctx context.Context, base mvcc.AppliedReadTx, tail []*batch) (*view, error) {
	idx, err := base.AppliedIndex(ctx)
	if err != nil {
		return nil, err
	}
	cur, comp, err := base.Revisions(ctx)
	if err != nil {
		return nil, err
	}
	i := 0
	for i < len(tail) && tail[i].index <= idx {
		i++
	}
	return &view{base: base, baseCur: cur, baseComp: comp, batches: tail[i:]}, nil
}

// GetLatest implements mvcc.Backend: from the tail when it changed the
// key, else from the base, with the newest revisions of the two.
func (b *Backend) GetLatest(ctx context.Context, key []byte) (*mvccpb.KeyValue, int64, int64, error) {
	tail := b.snapshot()
	v := &view{batches: tail}
	headCur, headComp, _ := v.Revisions(ctx)
	if o, ok := v.newest(string(key), maxRev); ok && len(tail) > 0 {
		kv, _ := o.live()
		return clone(kv), headCur, headComp, nil
	}
	kv, cur, comp, err := b.base.GetLatest(ctx, key)
	if err != nil {
		return nil, 0, 0, err
	}
	// The key is not in the tail, so the base's row is its row at the
	// tail's head too; the base may be newer still if a flush landed
	// since the tail was taken. Of two states, the newer has both
	// revisions at least as high (neither ever goes down).
	return kv, max(cur, headCur), max(comp, headComp), nil
}

// BeginWrite implements mvcc.Backend.
func (b *Backend) BeginWrite(ctx context.Context) (mvcc.WriteTx, error) {
	return b.BeginAppliedWrite(ctx) // a nil AppliedWriteTx converts to a nil WriteTx
}

// BeginAppliedWrite is BeginWrite, typed to record a replicated log's
// index with the batch (raftsql's member database).
func (b *Backend) BeginAppliedWrite(ctx context.Context) (mvcc.AppliedWriteTx, error) {
	tx, err := b.beginWrite(ctx)
	if err != nil {
		return nil, err // not a nil *writeTx in a non-nil interface
	}
	return tx, nil
}

func (b *Backend) beginWrite(ctx context.Context) (*writeTx, error) {
	select {
	case b.writeSem <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("memtail: wait for writer: %w", ctx.Err())
	}
	b.mu.Lock()
	tail, failed, closed := b.tail, b.failed, b.closed
	b.mu.Unlock()
	switch {
	case closed:
		b.unlockWriter()
		return nil, mvcc.ErrClosed
	case failed != nil:
		b.unlockWriter()
		return nil, failed
	}
	open := newBatch()
	// The open batch last, so the transaction's reads see its writes;
	// cap the slice so appending never writes into the shared tail. The
	// base is read only if a read needs it (writeTx.baseRead).
	batches := append(tail[:len(tail):len(tail)], open)
	return &writeTx{view: view{batches: batches}, b: b, open: open, tail: tail,
		seen: map[string]bool{}, fills: map[string]*mvccpb.KeyValue{}, before: map[string]bool{},
		metaOnly: map[string]bool{}}, nil
}

// headRevisions are the newest committed revisions, if known.
type headRevisions struct {
	current, compacted int64
	known              bool
}

func (b *Backend) unlockWriter() { <-b.writeSem }

// number gives a batch its index: the one a replicated log gave it, or the
// next. Called with mu held.
func (b *Backend) number(index uint64) (uint64, error) {
	if b.failed != nil {
		return 0, b.failed
	}
	if b.flushErr != nil {
		return 0, b.flushErr
	}
	if index == 0 {
		if b.opts.Numbered {
			return b.lastIndex, nil
		}
		index = b.lastIndex + 1
	}
	if index <= b.lastIndex {
		return 0, fmt.Errorf("memtail: batch index %d after %d", index, b.lastIndex)
	}
	return index, nil
}

// numberAndLog numbers bt (see number) and makes it durable in the log.
func (b *Backend) numberAndLog(bt *batch, index uint64) (uint64, error) {
	b.mu.Lock()
	index, err := b.number(index)
	b.mu.Unlock()
	if err != nil {
		return 0, err
	}
	bt.index = index
	return index, b.logBatch(bt)
}

// append makes a committed batch durable in the log, then puts it at the
// end of the tail, where reads see it: a read never sees a write a crash
// could take back.
func (b *Backend) append(bt *batch, index uint64) error {
	if index == 0 && b.opts.Numbered {
		if len(bt.ops) == 0 {
			return nil
		}
		return b.applyUnnumbered(bt)
	}
	index, err := b.numberAndLog(bt, index)
	if err != nil {
		return err
	}
	b.mu.Lock()
	b.lastIndex = index
	tail := make([]*batch, len(b.tail), len(b.tail)+1)
	copy(tail, b.tail)
	b.tail = append(tail, bt)
	b.tailOps += len(bt.ops)
	full := b.tailOps >= b.opts.FlushOps
	b.mu.Unlock()
	if full {
		select {
		case b.kick <- struct{}{}:
		default:
		}
	}
	return nil
}

// applyUnnumbered applies bt, a batch outside the caller's numbered log
// (Options.Numbered), to the base at once: the tail is flushed first and
// the base records the newest number again, so the tail never holds a
// batch it cannot order. Such batches are rare (a Store's bootstrap, a
// maintenance step), and the writer lock keeps others out meanwhile.
func (b *Backend) applyUnnumbered(bt *batch) error {
	ctx := context.Background()
	if err := b.flush(ctx); err != nil {
		return err
	}
	tx, err := b.base.BeginAppliedWrite(ctx)
	if err != nil {
		return fmt.Errorf("memtail: write a batch outside the log: %w", err)
	}
	b.mu.Lock()
	bt.index = b.lastIndex
	b.mu.Unlock()
	return b.apply(ctx, tx, []*batch{bt})
}

// commitDirect commits tx, a transaction of the base begun with the tail
// empty (the writer lock keeps it so) that holds bt's ops already, after
// the log has bt.
func (b *Backend) commitDirect(tx mvcc.AppliedWriteTx, bt *batch, index uint64) error {
	index, err := b.numberAndLog(bt, index)
	if err != nil {
		return err
	}
	if err := commitAt(context.Background(), tx, index); err != nil {
		// The log holds the batch: the base must not go on without it.
		b.fail(fmt.Errorf("memtail: commit batch %d with a compaction: %w", index, err))
		return err
	}
	b.mu.Lock()
	b.lastIndex, b.flushed = index, index
	b.mu.Unlock()
	return nil
}

// AppliedIndex is the index of the newest committed batch, flushed or
// not: where a log that feeds this Backend resumes.
func (b *Backend) AppliedIndex(context.Context) (uint64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.lastIndex, nil
}

// Size implements mvcc.Backend: the base's. It does not wait for the
// tail: the quota reads it every 100 ms, and the tail reaches the base
// within a flush interval.
func (b *Backend) Size(ctx context.Context) (int64, int64, error) {
	return b.base.Size(ctx)
}

// Defragment implements mvcc.Backend.
func (b *Backend) Defragment(ctx context.Context) error {
	if err := b.flush(ctx); err != nil {
		return err
	}
	return b.base.Defragment(ctx)
}

// Snapshot implements mvcc.Backend: the base's, with every committed batch
// flushed into it first.
func (b *Backend) Snapshot(ctx context.Context) (io.ReadCloser, int64, error) {
	if err := b.flush(ctx); err != nil {
		return nil, 0, err
	}
	return b.base.Snapshot(ctx)
}

// Close flushes the tail, stops the flusher, syncs the base, releases the
// log and closes both.
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.mu.Unlock()
	close(b.stop)
	b.wg.Wait()
	err := b.flush(context.Background())
	if b.wal != nil {
		if err == nil {
			// Forced: what earlier runs flushed unsynced must be durable
			// before a caller may drop the log.
			err = b.release(true)
		}
		err = errors.Join(err, b.wal.close())
	}
	return errors.Join(err, b.base.Close())
}
