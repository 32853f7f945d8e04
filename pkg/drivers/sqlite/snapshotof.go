package sqlite

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/kite-db/kite/pkg/mvcc"
)

// SnapshotOf is the Snapshot of a driver whose database is not a file
// kite could stream (postgres, mysql): it copies what one read
// transaction of begin sees into a new SQLite database in a temporary
// directory under dir (mvcc.Copy: rows, revisions, leases and alarms
// exactly), and returns a reader of that file, which removes it when
// closed, with its size. `kite snapshot restore` restores it into SQLite
// mode. The read transaction stays open for the copy's duration.
func SnapshotOf(ctx context.Context, dir string, log *slog.Logger, begin func(context.Context) (mvcc.ReadTx, error)) (_ io.ReadCloser, _ int64, err error) {
	tmp, err := os.MkdirTemp(dir, "kite-snapshot-")
	if err != nil {
		return nil, 0, fmt.Errorf("snapshot: create temporary directory: %w", err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, os.RemoveAll(tmp))
		}
	}()
	path := filepath.Join(tmp, "kite.db")
	if err := copyInto(ctx, path, log, begin); err != nil {
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
	return &copyFile{File: f, dir: tmp}, st.Size(), nil
}

// copyInto writes the database into a new SQLite file at path and closes
// it, which checkpoints its WAL into the file: the file alone is the copy.
func copyInto(ctx context.Context, path string, log *slog.Logger, begin func(context.Context) (mvcc.ReadTx, error)) (err error) {
	dst, err := Open(ctx, path, Options{Logger: log})
	if err != nil {
		return fmt.Errorf("create sqlite copy: %w", err)
	}
	defer func() { err = errors.Join(err, dst.Close()) }()
	src, err := begin(ctx)
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

// copyFile is a copy in a temporary directory of its own, which is
// removed when the file is closed.
type copyFile struct {
	*os.File
	dir string
}

func (s *copyFile) Close() error {
	return errors.Join(s.File.Close(), os.RemoveAll(s.dir))
}
