package mysql

import (
	"context"
	"io"

	"github.com/kite-db/kite/pkg/drivers/sqlite"
	"github.com/kite-db/kite/pkg/mvcc"
)

// Snapshot implements mvcc.Backend. A MySQL database is not a file kite
// could stream, so the snapshot is a copy of one read transaction's
// consistent snapshot into a temporary SQLite database (sqlite.SnapshotOf),
// which `kite snapshot restore` knows how to restore: a snapshot of a
// MySQL-backed cluster restores into SQLite mode, as a Postgres-backed
// one's does. Writers are not blocked meanwhile; the copy holds a
// connection and an open snapshot (InnoDB keeps the undo log it needs)
// for its duration.
func (b *Backend) Snapshot(ctx context.Context) (io.ReadCloser, int64, error) {
	if b.closed.Load() {
		return nil, 0, mvcc.ErrClosed
	}
	return sqlite.SnapshotOf(ctx, b.opts.TempDir, b.log, b.BeginRead)
}
