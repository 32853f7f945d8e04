package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/kite-db/kite/pkg/mvcc"
)

// Size implements mvcc.Backend. Pages on the freelist are allocated on disk
// but hold no data: they are what Defragment gives back.
func (b *Backend) Size(ctx context.Context) (size, inUse int64, err error) {
	if b.closed.Load() {
		return 0, 0, mvcc.ErrClosed
	}
	err = b.rdb.QueryRowContext(ctx, `SELECT p.page_count * s.page_size,
		(p.page_count - f.freelist_count) * s.page_size
		FROM pragma_page_count() AS p, pragma_page_size() AS s, pragma_freelist_count() AS f`).
		Scan(&size, &inUse)
	if err != nil {
		return 0, 0, fmt.Errorf("read database size: %w", err)
	}
	return size, inUse, nil
}

// Defragment implements mvcc.Backend. VACUUM rewrites the file through the
// WAL; the TRUNCATE checkpoint then moves it into the database file and
// shrinks the WAL, so the space really returns to the file system. Writers
// wait meanwhile; readers keep reading their snapshots.
func (b *Backend) Defragment(ctx context.Context) error {
	if err := b.lockWriter(ctx); err != nil {
		return fmt.Errorf("defragment: %w", err)
	}
	defer b.unlockWriter()
	if _, err := b.wconn.ExecContext(ctx, "VACUUM"); err != nil {
		return fmt.Errorf("defragment: vacuum: %w", err)
	}
	// A reader still on an old snapshot makes the checkpoint partial (busy
	// is reported in its result row, not as an error); the next automatic
	// checkpoint finishes the job.
	var busy, logPages, checkpointed int64
	err := b.wconn.QueryRowContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)").
		Scan(&busy, &logPages, &checkpointed)
	if err != nil {
		return fmt.Errorf("defragment: checkpoint: %w", err)
	}
	b.log.Info("defragmented", "checkpoint_busy", busy == 1)
	return nil
}

// Snapshot implements mvcc.Backend. VACUUM INTO writes a compact,
// self-contained copy of one read snapshot, so it neither blocks the writer
// nor needs the WAL. It runs on a connection of its own: the read pool's are
// query_only, which refuses VACUUM INTO, and the writer's would hold up
// writes for the whole copy. The copy goes to a temporary file next to the
// database (the same file system, not a possibly small /tmp); closing the
// returned reader removes it.
func (b *Backend) Snapshot(ctx context.Context) (_ io.ReadCloser, _ int64, err error) {
	if b.closed.Load() {
		return nil, 0, mvcc.ErrClosed
	}
	f, err := os.CreateTemp(filepath.Dir(b.path), filepath.Base(b.path)+".snapshot-*")
	if err != nil {
		return nil, 0, fmt.Errorf("snapshot: create temporary file: %w", err)
	}
	snap := &snapshotFile{File: f}
	defer func() {
		if err != nil {
			err = errors.Join(err, snap.Close())
		}
	}()
	db, err := sql.Open("sqlite", dsn(b.path, b.opts))
	if err != nil {
		return nil, 0, fmt.Errorf("snapshot: open connection: %w", err)
	}
	defer func() { err = errors.Join(err, db.Close()) }()
	// VACUUM INTO accepts an existing file only if it is empty, as this one is.
	if _, err := db.ExecContext(ctx, "VACUUM INTO ?", f.Name()); err != nil {
		return nil, 0, fmt.Errorf("snapshot: vacuum into %q: %w", f.Name(), err)
	}
	st, err := f.Stat()
	if err != nil {
		return nil, 0, fmt.Errorf("snapshot: size of %q: %w", f.Name(), err)
	}
	return snap, st.Size(), nil
}

// snapshotFile is a snapshot copy that deletes itself when closed.
type snapshotFile struct{ *os.File }

func (s *snapshotFile) Close() error {
	name := s.Name()
	return errors.Join(s.File.Close(), removeIfExists(name), removeIfExists(name+"-journal"))
}

func removeIfExists(name string) error {
	if err := os.Remove(name); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
