package postgres

import (
	"context"
	"io"

	"github.com/kite-db/kite/pkg/drivers/sqlite"
	"github.com/kite-db/kite/pkg/mvcc"
)

// Snapshot implements mvcc.Backend. A Postgres database is not a file kite
// could stream, so the snapshot is a copy of one REPEATABLE READ snapshot
// into a temporary SQLite database (sqlite.SnapshotOf), which `kite
// snapshot restore` already knows how to restore: a snapshot of a
// Postgres-backed cluster restores into SQLite mode. Writers are not
// blocked meanwhile; the copy holds a pool connection and an open snapshot
// for its duration.
func (b *Backend) Snapshot(ctx context.Context) (io.ReadCloser, int64, error) {
	if b.closed.Load() {
		return nil, 0, mvcc.ErrClosed
	}
	return sqlite.SnapshotOf(ctx, b.opts.TempDir, b.log, b.BeginRead)
}
