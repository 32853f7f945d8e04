package mysql

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/kite-db/kite/pkg/drivers/sqlite"
	"github.com/kite-db/kite/pkg/mvcc"
)

// Snapshot implements mvcc.Backend. A MySQL database is not a file kite
// could stream, so the snapshot is a copy of one read transaction's
// consistent snapshot into a temporary SQLite database, which `kite
// snapshot restore` knows how to restore: a snapshot of a MySQL-backed
// cluster restores into SQLite mode, as a Postgres-backed one's does.
// Revisions, leases and alarms are copied exactly (mvcc.Copy). Writers are
// not blocked meanwhile; the copy holds a connection and an open snapshot
// (InnoDB keeps the undo log it needs) for its duration.
func (b *Backend) Snapshot(ctx context.Context) (_ io.ReadCloser, _ int64, err error) {
	if b.closed.Load() {
		return nil, 0, mvcc.ErrClosed
	}
	dir, err := os.MkdirTemp(b.opts.TempDir, "kite-snapshot-")
	if err != nil {
		return nil, 0, fmt.Errorf("snapshot: create temporary directory: %w", err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, os.RemoveAll(dir))
		}
	}()
	path := filepath.Join(dir, "kite.db")
	if err := b.copyInto(ctx, path); err != nil {
		return nil, 0, fmt.Errorf("snapshot: %w", err)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, fmt.Errorf("snapshot: open copy: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		return nil, 0, errors.Join(fmt.Errorf("snapshot: size of copy: %w", err), f.Close())
	}
	return &snapshotFile{File: f, dir: dir}, st.Size(), nil
}

// copyInto writes the database into a new SQLite file at path and closes
// it, which checkpoints its WAL into the file: the file alone is the copy.
func (b *Backend) copyInto(ctx context.Context, path string) (err error) {
	dst, err := sqlite.Open(ctx, path, sqlite.Options{Logger: b.log})
	if err != nil {
		return fmt.Errorf("create sqlite copy: %w", err)
	}
	defer func() { err = errors.Join(err, dst.Close()) }()
	src, err := b.BeginRead(ctx)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, src.Rollback()) }()
	w, err := dst.BeginWrite(ctx)
	if err != nil {
		return fmt.Errorf("begin sqlite copy: %w", err)
	}
	if err := mvcc.Copy(ctx, w, src); err != nil {
		return errors.Join(err, w.Rollback())
	}
	if err := w.Commit(); err != nil {
		return fmt.Errorf("commit sqlite copy: %w", err)
	}
	return nil
}

// snapshotFile is a snapshot copy that deletes itself when closed.
type snapshotFile struct {
	*os.File
	dir string
}

func (s *snapshotFile) Close() error {
	return errors.Join(s.File.Close(), os.RemoveAll(s.dir))
}
