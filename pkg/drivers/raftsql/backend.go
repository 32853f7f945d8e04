package raftsql

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/kite-db/kite/pkg/drivers/sqlite"
	"github.com/kite-db/kite/pkg/mvcc"
)

// localDB is the node's SQLite database, which a snapshot from the leader
// can replace while the node runs. Every transaction is counted; a
// replacement waits until none is open, so no reader ever sees a file
// swapped under it, then lets new transactions in on the new file.
type localDB struct {
	path string
	opts sqlite.Options

	mu        sync.Mutex
	idle      *sync.Cond // signalled when open reaches 0 or replacing ends
	b         *sqlite.Backend
	open      int
	replacing bool
}

func openLocalDB(ctx context.Context, path string, opts sqlite.Options) (*localDB, error) {
	b, err := sqlite.Open(ctx, path, opts)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	d := &localDB{path: path, opts: opts, b: b}
	d.idle = sync.NewCond(&d.mu)
	return d, nil
}

// acquire returns the current database and counts a user of it.
func (d *localDB) acquire() *sqlite.Backend {
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
	b, err := sqlite.Open(ctx, d.path, d.opts)
	if err != nil {
		return fmt.Errorf("open restored database: %w", err)
	}
	d.b = b
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
	b := n.db.acquire()
	tx, err := b.BeginWrite(ctx)
	if err != nil {
		n.db.release()
		return nil, err
	}
	return &writeTx{WriteTx: tx, release: n.db.release}, nil
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
	mvcc.WriteTx
	release func()
	once    sync.Once
}

var _ mvcc.AppliedIndexTx = (*writeTx)(nil)

func (t *writeTx) SetAppliedIndex(ctx context.Context, index uint64) error {
	return t.WriteTx.(mvcc.AppliedIndexTx).SetAppliedIndex(ctx, index)
}

func (t *writeTx) Commit() error {
	err := t.WriteTx.Commit()
	t.once.Do(t.release)
	return err
}

func (t *writeTx) Rollback() error {
	err := t.WriteTx.Rollback()
	t.once.Do(t.release)
	return err
}
