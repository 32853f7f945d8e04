package raftsql

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/kite-db/kite/pkg/drivers/sqlite"
	"github.com/kite-db/kite/pkg/mvcc"
	"github.com/kite-db/kite/pkg/mvcc/memtail"
)

// localDB is the node's SQLite database, which a snapshot from the leader
// can replace while the node runs. Every transaction is counted; a
// replacement waits until none is open, so no reader ever sees a file
// swapped under it, then lets new transactions in on the new file.
type localDB struct {
	path string
	opts sqlite.Options
	// behind, if set, serves the database through a memtail with these
	// options (Config.ApplyBehind).
	behind *memtail.Options
	log    *slog.Logger
	// flushFailed stops the member when entries applied in memory cannot
	// reach SQLite (a full disk), as a failed apply does: it must not
	// serve past entries it may never hold; a restart replays them.
	flushFailed func(error)

	mu        sync.Mutex
	idle      *sync.Cond // signalled when open reaches 0 or replacing ends
	b         memberDB
	sq        *sqlite.Backend // the SQLite under b (b itself without a memtail)
	open      int
	replacing bool
}

// memberDB is what a member's transactions go through: its SQLite
// backend, or a memtail over it that holds the newest applied entries in
// memory. AppliedIndex is the newest entry it holds (a restart resumes
// after the one SQLite holds); Sync makes everything it holds durable in
// SQLite, before the WAL before it is released.
type memberDB interface {
	mvcc.Backend
	AppliedIndex(ctx context.Context) (uint64, error)
	BeginAppliedWrite(ctx context.Context) (mvcc.AppliedWriteTx, error)
	Sync() error
}

var (
	_ memberDB     = (*sqlite.Backend)(nil)
	_ memberDB     = (*memtail.Backend)(nil)
	_ memtail.Base = (*sqlite.Backend)(nil)
)

func openLocalDB(ctx context.Context, path string, opts sqlite.Options, behind *memtail.Options, log *slog.Logger, flushFailed func(error)) (*localDB, error) {
	d := &localDB{path: path, opts: opts, behind: behind, log: log, flushFailed: flushFailed}
	d.idle = sync.NewCond(&d.mu)
	if err := d.openDB(ctx); err != nil {
		return nil, err
	}
	return d, nil
}

// openDB opens the database file at d.path, behind a memtail if d says
// so, as d.b and d.sq.
func (d *localDB) openDB(ctx context.Context) error {
	sq, err := sqlite.Open(ctx, d.path, d.opts)
	if err != nil {
		return fmt.Errorf("open %s: %w", d.path, err)
	}
	var b memberDB = sq
	if d.behind != nil {
		// No log of memtail's own: the raft WAL is the log, replayed
		// from the index SQLite holds.
		o := *d.behind
		o.Logger, o.Numbered, o.FlushFailed = d.log, true, d.flushFailed
		t, err := memtail.Open(ctx, sq, o)
		if err != nil {
			return errors.Join(fmt.Errorf("open %s: %w", d.path, err), sq.Close())
		}
		b = t
	}
	d.b, d.sq = b, sq
	return nil
}

// acquire returns the current database and counts a user of it.
func (d *localDB) acquire() memberDB {
	d.mu.Lock()
	defer d.mu.Unlock()
	for d.replacing {
		d.idle.Wait()
	}
	d.open++
	return d.b
}

func (d *localDB) release() {
	d.mu.Lock()
	d.open--
	if d.open == 0 {
		d.idle.Broadcast()
	}
	d.mu.Unlock()
}

// replace closes the database once no transaction is open, moves the file
// received from the leader into its place and opens it.
func (d *localDB) replace(ctx context.Context, received string) error {
	d.mu.Lock()
	for d.replacing {
		d.idle.Wait()
	}
	d.replacing = true
	for d.open > 0 {
		d.idle.Wait()
	}
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		d.replacing = false
		d.idle.Broadcast()
		d.mu.Unlock()
	}()
	if err := d.b.Close(); err != nil {
		return fmt.Errorf("close database before restoring a snapshot: %w", err)
	}
	// The old file's WAL and index must go with it: SQLite would replay
	// them into the new file.
	for _, suffix := range []string{"-wal", "-shm"} {
		if err := os.Remove(d.path + suffix); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("remove %s: %w", d.path+suffix, err)
		}
	}
	if err := os.Rename(received, d.path); err != nil {
		return fmt.Errorf("move received snapshot into place: %w", err)
	}
	if err := syncDir(filepath.Dir(d.path)); err != nil {
		return err
	}
	if err := d.openDB(ctx); err != nil {
		return fmt.Errorf("open restored database: %w", err)
	}
	return nil
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

func (d *localDB) close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.b.Close()
}

// The mvcc.Backend methods of Node delegate to the current database.

// BeginRead implements mvcc.Backend.
func (n *Node) BeginRead(ctx context.Context) (mvcc.ReadTx, error) {
	b := n.db.acquire()
	tx, err := b.BeginRead(ctx)
	if err != nil {
		n.db.release()
		return nil, err
	}
	return &readTx{ReadTx: tx, release: n.db.release}, nil
}

// BeginWrite implements mvcc.Backend.
func (n *Node) BeginWrite(ctx context.Context) (mvcc.WriteTx, error) {
	return n.BeginAppliedWrite(ctx)
}

// BeginAppliedWrite implements mvcc.Replicator: the Store applies each
// batch of committed entries in one, with the batch's last index.
func (n *Node) BeginAppliedWrite(ctx context.Context) (mvcc.AppliedWriteTx, error) {
	b := n.db.acquire()
	tx, err := b.BeginAppliedWrite(ctx)
	if err != nil {
		n.db.release()
		return nil, err
	}
	return &writeTx{AppliedWriteTx: tx, release: n.db.release}, nil
}

// GetLatest implements mvcc.Backend.
func (n *Node) GetLatest(ctx context.Context, key []byte) (*mvccpb.KeyValue, int64, int64, error) {
	b := n.db.acquire()
	defer n.db.release()
	return b.GetLatest(ctx, key)
}

// Size implements mvcc.Backend.
func (n *Node) Size(ctx context.Context) (int64, int64, error) {
	b := n.db.acquire()
	defer n.db.release()
	return b.Size(ctx)
}

// Defragment implements mvcc.Backend: this node's file only, as etcd's
// defrag is per member.
func (n *Node) Defragment(ctx context.Context) error {
	b := n.db.acquire()
	defer n.db.release()
	return b.Defragment(ctx)
}

// Snapshot implements mvcc.Backend.
func (n *Node) Snapshot(ctx context.Context) (io.ReadCloser, int64, error) {
	b := n.db.acquire()
	defer n.db.release()
	return b.Snapshot(ctx)
}

// syncDB makes every commit so far durable.
func (n *Node) syncDB() error {
	b := n.db.acquire()
	defer n.db.release()
	return b.Sync()
}

// appliedIndex reads the index the database last recorded.
func (n *Node) appliedIndex(ctx context.Context) (uint64, error) {
	b := n.db.acquire()
	defer n.db.release()
	return b.AppliedIndex(ctx)
}

type readTx struct {
	mvcc.ReadTx
	release func()
	once    sync.Once
}

func (t *readTx) Rollback() error {
	err := t.ReadTx.Rollback()
	t.once.Do(t.release)
	return err
}

type writeTx struct {
	mvcc.AppliedWriteTx
	release func()
	once    sync.Once
}

var _ mvcc.RowMetaReader = (*writeTx)(nil)

// GetMeta implements mvcc.RowMetaReader, which the embedded interface
// would hide: memtail keeps rows read so without their values, SQLite
// reads them without the value column. Both member databases have it;
// anything else is asked Get.
func (t *writeTx) GetMeta(ctx context.Context, key []byte) (*mvccpb.KeyValue, error) {
	if m, ok := t.AppliedWriteTx.(mvcc.RowMetaReader); ok {
		return m.GetMeta(ctx, key)
	}
	kv, err := t.AppliedWriteTx.Get(ctx, key)
	if kv != nil {
		kv.Value = nil // the row is this caller's
	}
	return kv, err
}

func (t *writeTx) Commit() error {
	err := t.AppliedWriteTx.Commit()
	t.once.Do(t.release)
	return err
}

func (t *writeTx) Rollback() error {
	err := t.AppliedWriteTx.Rollback()
	t.once.Do(t.release)
	return err
}
