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

// Defragment implements mvcc.Backend as etcd's defrag does its job: it
// rewrites kite's tables (VACUUM FULL, then ANALYZE) so that the space rows
// removed by compaction and overwrites is given back to the file system and
// Size, which the quota compares, shrinks. Postgres reuses that space for
// new rows anyway, as bbolt reuses free pages; like etcd's, the file only
// shrinks through a defragment. The rewrite holds an exclusive lock on each
// table while it runs, so every kite server on the database waits for it,
// as every client of an etcd member waits for that member's defrag: run it
// at a quiet time, once (not once per server).
func (b *Backend) Defragment(ctx context.Context) error {
	if b.closed.Load() {
		return mvcc.ErrClosed
	}
	// Exec without arguments uses the simple protocol, outside any
	// transaction block, as VACUUM requires.
	if _, err := b.pool.Exec(ctx, "VACUUM (FULL, ANALYZE) "+strings.Join(kiteTables(), ", ")); err != nil {
		return classify(fmt.Errorf("defragment: vacuum: %w", err))
	}
	b.log.Info("defragmented")
	return nil
}
