package mysql

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/kite-db/kite/pkg/mvcc"
)

// kiteTables are the tables Size measures and Defragment rebuilds.
func kiteTables() []string {
	return []string{"kite_log", "kite_live", "kite_lease", "kite_alarm", "kite_revision", "kite_auth", "kite_schema"}
}

// sqlSize measures kite's tables with their indexes from InnoDB's
// statistics; DATA_FREE is the free space inside each table's file
// (file-per-table, the default), which the part in use leaves out. The
// statistics lag writes (InnoDB refreshes them as tables change, and MySQL
// 8 caches them for information_schema_stats_expiry), so both numbers are
// estimates, as etcd's own are of a file with free pages.
const sqlSize = `SELECT COALESCE(SUM(data_length + index_length + data_free), 0),
	COALESCE(SUM(data_length + index_length), 0)
	FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name IN (`

// Size implements mvcc.Backend: the bytes of kite's tables and indexes
// with their free space, and without it.
func (b *Backend) Size(ctx context.Context) (size, inUse int64, err error) {
	if b.closed.Load() {
		return 0, 0, mvcc.ErrClosed
	}
	tables := kiteTables()
	args := make([]any, len(tables))
	for i, t := range tables {
		args[i] = t
	}
	q := sqlSize + strings.Repeat("?, ", len(tables)-1) + "?)"
	if err := b.db.QueryRowContext(ctx, q, args...).Scan(&size, &inUse); err != nil {
		return 0, 0, classify(fmt.Errorf("read database size: %w", err))
	}
	return size, min(inUse, size), nil
}

// Defragment implements mvcc.Backend as etcd's defrag does its job:
// OPTIMIZE TABLE rebuilds each InnoDB table (ALTER TABLE ... FORCE, then
// ANALYZE), which gives the space of rows removed by compaction and
// overwrites back to the file system and refreshes the statistics Size
// reads. InnoDB reuses free pages for new rows anyway; the rebuild is
// online, writes wait only for its short final step.
func (b *Backend) Defragment(ctx context.Context) error {
	if b.closed.Load() {
		return mvcc.ErrClosed
	}
	rows, err := b.db.QueryContext(ctx, "OPTIMIZE TABLE "+strings.Join(kiteTables(), ", "))
	if err != nil {
		return classify(fmt.Errorf("defragment: %w", err))
	}
	defer rows.Close()
	var problems []error
	for rows.Next() {
		var table, op, kind, text string
		if err := rows.Scan(&table, &op, &kind, &text); err != nil {
			return fmt.Errorf("defragment: %w", err)
		}
		// InnoDB answers "note: Table does not support optimize, doing
		// recreate + analyze instead", then "status: OK".
		if strings.EqualFold(kind, "error") {
			problems = append(problems, fmt.Errorf("%s: %s", table, text))
		}
	}
	if err := errors.Join(rows.Err(), errors.Join(problems...)); err != nil {
		return classify(fmt.Errorf("defragment: %w", err))
	}
	b.log.Info("defragmented")
	return nil
}
