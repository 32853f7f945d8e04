package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Advisory lock keys. Advisory locks, like LISTEN channels, are scoped to
// the current database, and one database holds one kite cluster, so fixed
// keys suffice. Both start with "kite" in ASCII (0x6b697465).
const (
	schemaLockKey  int64 = 0x6b697465_00000001
	primaryLockKey int64 = 0x6b697465_00000002
)

// migrations lists the schema changes, one step per version: version N is
// the state after the first N steps. A new version appends a step; a step
// once released never changes.
//
// Version 1:
//
//   - kite_log is the revision log, one row per key change, keyed by (rev,
//     sub): appends land at the right edge of the primary key, and revision
//     order is key order, so Changes and CompactBatch walk a key range.
//     Fixed-width columns come first so rows carry no alignment padding.
//   - kite_log_key (key, rev, sub) serves historical reads, previous rows
//     and compaction: the newest row of a key at or below a revision is one
//     backward seek, and the next distinct key is one seek past a key's
//     whole history.
//   - kite_live holds the newest non-tombstone row of each key, value
//     included, so latest reads, counts and GetLatest never touch the log,
//     at the cost of storing current values twice. Its fillfactor leaves
//     room on each page for HOT updates: a put of an existing key rewrites
//     its row, and with room on the page that touches no index.
//   - kite_live_lease serves LeaseKeys. It is partial: keys without a lease
//     (most of them) are not in it.
//   - kite_revision is the one row holding the current and compacted
//     revisions. Every write transaction locks it first (write.go).
//
// Version 2:
//
//   - kite_auth is the one row holding the authentication state (etcd's
//     users, roles, whether auth is enabled and its revision), encoded by
//     the Store; a database that never stored one has no row. A state of
//     some hundreds of KiB is TOASTed out of line.
//
// Version 3:
//
//   - kite_revision records the Postgres timeline of the last write and
//     whether its primary acknowledged only synchronously replicated
//     commits (history.go). 0 is no timeline: the next write records one.
//
// Version 4:
//
//   - kite_lease.renewed is when the lease was granted or last kept
//     alive, by the database's clock. Expiry is decided by the primary's
//     clock but checked against it inside the revoking transaction
//     (writeTx.LeaseExpired), so a server that missed renewals made
//     through another never revokes a live lease. Leases of a database
//     migrated to this version start their TTL at the migration.
//
// bytea compares bytewise (memcmp), as etcd orders keys; it has no
// collation. A btree entry is limited to about 2.7 kB, which bounds key
// length (etcd keys are paths, far shorter).
func migrations() [][]string {
	return [][]string{{
		`CREATE TABLE kite_log (
			rev        bigint  NOT NULL,
			create_rev bigint  NOT NULL,
			version    bigint  NOT NULL,
			lease      bigint  NOT NULL,
			sub        integer NOT NULL,
			deleted    boolean NOT NULL,
			key        bytea   NOT NULL,
			value      bytea   NOT NULL,
			PRIMARY KEY (rev, sub)
		)`,
		`CREATE INDEX kite_log_key ON kite_log (key, rev, sub)`,
		`CREATE TABLE kite_live (
			mod_rev    bigint NOT NULL,
			create_rev bigint NOT NULL,
			version    bigint NOT NULL,
			lease      bigint NOT NULL,
			key        bytea  NOT NULL PRIMARY KEY,
			value      bytea  NOT NULL
		) WITH (fillfactor = 80)`,
		`CREATE INDEX kite_live_lease ON kite_live (lease, key) WHERE lease <> 0`,
		`CREATE TABLE kite_lease (
			id  bigint NOT NULL PRIMARY KEY,
			ttl bigint NOT NULL
		)`,
		// member is etcd's uint64 member ID stored through an int64 cast
		// (memberColumn), so (member, type) order is that of the signed
		// value, as in the SQLite driver.
		`CREATE TABLE kite_alarm (
			member bigint  NOT NULL,
			type   integer NOT NULL,
			PRIMARY KEY (member, type)
		)`,
		`CREATE TABLE kite_revision (
			one           boolean NOT NULL PRIMARY KEY DEFAULT true CHECK (one),
			current_rev   bigint  NOT NULL,
			compacted_rev bigint  NOT NULL
		)`,
		`INSERT INTO kite_revision (current_rev, compacted_rev) VALUES (0, 0)`,
	}, {
		`CREATE TABLE kite_auth (
			one   boolean NOT NULL PRIMARY KEY DEFAULT true CHECK (one),
			state bytea   NOT NULL
		)`,
	}, {
		`ALTER TABLE kite_revision ADD COLUMN timeline bigint NOT NULL DEFAULT 0,
			ADD COLUMN synced boolean NOT NULL DEFAULT false`,
	}, {
		`ALTER TABLE kite_lease ADD COLUMN renewed timestamptz NOT NULL DEFAULT clock_timestamp()`,
	}}
}

// schemaVersion is the version this code reads and writes.
func schemaVersion() int { return len(migrations()) }

// versionTable is the same in every version: it is created, and the stored
// version read, before anything else is touched.
const versionTable = `CREATE TABLE IF NOT EXISTS kite_schema (version integer NOT NULL)`

// migrate brings the database to schemaVersion in one transaction, under a
// transaction-level advisory lock: servers starting together on a new
// database wait for the first one instead of racing to create the same
// tables, and a failed migration leaves nothing behind. A database written
// by a newer kite is refused rather than misread.
func migrate(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger) error {
	return migrateTo(ctx, pool, log, migrations())
}

// migrateTo is migrate with the steps given: a test makes a database of an
// older version with the first steps only.
func migrateTo(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger, steps [][]string) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrate schema: connect: %w", err)
	}
	defer conn.Release()
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return fmt.Errorf("migrate schema: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, schemaLockKey); err != nil {
		return fmt.Errorf("migrate schema: take schema lock: %w", err)
	}
	if _, err := tx.Exec(ctx, versionTable); err != nil {
		return fmt.Errorf("migrate schema: create version table: %w", err)
	}
	var have int
	err = tx.QueryRow(ctx, `SELECT version FROM kite_schema`).Scan(&have)
	switch {
	case errors.Is(err, pgx.ErrNoRows): // a new database
	case err != nil:
		return fmt.Errorf("migrate schema: read version: %w", err)
	}
	want := len(steps)
	if have > want {
		return fmt.Errorf("database schema version %d is newer than this kite understands (%d): "+
			"upgrade kite, or point it at another database", have, want)
	}
	if have == want {
		return nil
	}
	for v, step := range steps[have:] {
		for _, stmt := range step {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return fmt.Errorf("migrate schema to version %d: %w", have+v+1, err)
			}
		}
	}
	set := `UPDATE kite_schema SET version = $1`
	if have == 0 {
		set = `INSERT INTO kite_schema (version) VALUES ($1)`
	}
	if _, err := tx.Exec(ctx, set, want); err != nil {
		return fmt.Errorf("migrate schema: record version: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("migrate schema: commit: %w", err)
	}
	log.Info("migrated schema", "from", have, "to", want)
	return nil
}
