package postgres

import (
	"context"
	"fmt"
	"strings"

	"github.com/kite-db/kite/pkg/mvcc"
)

// kiteTables are the tables Size measures and Defragment vacuums.
func kiteTables() []string {
	return []string{"kite_log", "kite_live", "kite_lease", "kite_alarm", "kite_revision", "kite_schema"}
}

// sqlSize measures kite's tables with their indexes and TOAST data. Postgres
// has no free-page count short of an extension (pgstattuple), so the part
// in use is estimated from the statistics collector: a table's heap and
// TOAST data scaled by its share of live tuples, plus its indexes in full.
// The counters lag commits by up to a second; a table they know nothing
// about counts as fully used.
const sqlSize = `SELECT COALESCE(sum(pg_total_relation_size(c.oid)), 0)::int8,
	COALESCE(sum(pg_table_size(c.oid) * CASE WHEN s.n_live_tup + s.n_dead_tup > 0
		THEN s.n_live_tup::float8 / (s.n_live_tup + s.n_dead_tup) ELSE 1 END
		+ pg_indexes_size(c.oid)), 0)::int8
	FROM pg_class AS c LEFT JOIN pg_stat_user_tables AS s ON s.relid = c.oid
	WHERE c.oid = ANY($1::regclass[])`

// Size implements mvcc.Backend: the bytes of kite's tables, indexes and
// TOAST data, and an estimate of the bytes holding live rows.
func (b *Backend) Size(ctx context.Context) (size, inUse int64, err error) {
	if b.closed.Load() {
		return 0, 0, mvcc.ErrClosed
	}
	if err := b.pool.QueryRow(ctx, sqlSize, kiteTables()).Scan(&size, &inUse); err != nil {
		return 0, 0, fmt.Errorf("read database size: %w", err)
	}
	return size, min(inUse, size), nil
}

// Defragment implements mvcc.Backend with a plain VACUUM (and ANALYZE) of
// kite's tables: dead rows left by compaction and overwrites become free
// space that new rows reuse, and empty pages at the end of a table go back
// to the file system. It does not block readers or writers of any kite
// server. VACUUM FULL would give back every free page, but it takes an
// exclusive lock that stops every read of the whole cluster while it
// rewrites the tables; an operator can still run it by hand.
func (b *Backend) Defragment(ctx context.Context) error {
	if b.closed.Load() {
		return mvcc.ErrClosed
	}
	// Exec without arguments uses the simple protocol, outside any
	// transaction block, as VACUUM requires.
	if _, err := b.pool.Exec(ctx, "VACUUM (ANALYZE) "+strings.Join(kiteTables(), ", ")); err != nil {
		return fmt.Errorf("defragment: vacuum: %w", err)
	}
	b.log.Info("defragmented")
	return nil
}
