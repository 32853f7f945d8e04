package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
)

// maxKeyLen is the longest key kite stores in MySQL, in bytes. Keys are
// VARBINARY, which compares bytewise as etcd orders keys, and are indexed
// whole: InnoDB (ROW_FORMAT=DYNAMIC, 16 KiB pages) bounds an index entry
// at 3072 bytes, and kite_log_key holds the key with its revision and
// sub-revision (12 bytes). A BLOB key would need a prefix index, which
// can neither keep two keys sharing the prefix apart (a primary key) nor
// give key order without a sort, so the bound is deliberate: 3000 bytes,
// with room left below the limit. etcd's keys are paths, far shorter;
// Put refuses a longer key with mvcc.ErrRequestTooLarge. Reads of longer
// keys are fine: they find nothing.
const maxKeyLen = 3000

// migrations lists the schema changes, one step per version: version N is
// the state after the first N steps. A new version appends a step; a step
// once released never changes. DDL commits implicitly in MySQL, so a step
// cannot be undone by a rollback: every statement of a step is written to
// be run again (IF NOT EXISTS, INSERT IGNORE), and the version is recorded
// after each step, so a start that died half-way through a step repeats
// it.
//
// Version 1:
//
//   - kite_log is the revision log, one row per key change, clustered by
//     (rev, sub): appends land at the right edge of the primary key, and
//     Changes and CompactBatch read a range of it. k is the key (KEY is
//     a reserved word).
//   - kite_log_key (k, rev, sub) serves historical reads, previous rows
//     and compaction: the newest row of a key at or below a revision is
//     one backward seek.
//   - kite_live holds the newest non-tombstone row of each key, value
//     included, so latest reads, counts and GetLatest never touch the log,
//     at the cost of storing current values twice. Clustered by key, a
//     latest range is one walk of the primary key.
//   - kite_live_lease serves LeaseKeys: an InnoDB secondary index carries
//     the primary key, so its order is (lease, k).
//   - kite_revision is the one row holding the current and compacted
//     revisions. Every write transaction locks it first (write.go).
//   - kite_auth is the one row of the authentication state, encoded by
//     the Store; a database that never stored one has no row.
//
// Values are LONGBLOB: etcd's requests go up to 1.5 MiB, and DYNAMIC rows
// keep a large value off the page, so a walk of keys reads none of it.
//
// Version 2, for several kite servers on one database (mvcc.Shared):
//
//   - kite_lease.renewed is when the lease was granted or last kept alive,
//     by the database's clock in UTC: the transaction that would revoke it
//     checks it (LeaseExpired). Leases of a version 1 database start their
//     clock at the migration.
//   - kite_server lists the running servers and the address where each
//     takes wake-ups (wake.go), with the time each last said it was alive.
//   - kite_primary is the primary lease: which server runs the once-only
//     jobs, until when (primary.go).
//   - kite_cluster holds the token a server must show to send wake-ups.
//
// Times are DATETIME(6) written with UTC_TIMESTAMP(6), so servers whose
// sessions have different time zones agree on them.
func migrations() [][]string {
	const table = ` ENGINE=InnoDB ROW_FORMAT=DYNAMIC`
	return [][]string{{
		`CREATE TABLE IF NOT EXISTS kite_log (
			rev        BIGINT          NOT NULL,
			sub        INT             NOT NULL,
			k          VARBINARY(3000) NOT NULL,
			create_rev BIGINT          NOT NULL,
			version    BIGINT          NOT NULL,
			lease      BIGINT          NOT NULL,
			deleted    BOOLEAN         NOT NULL,
			value      LONGBLOB        NOT NULL,
			PRIMARY KEY (rev, sub),
			KEY kite_log_key (k, rev, sub)
		)` + table,
		`CREATE TABLE IF NOT EXISTS kite_live (
			k          VARBINARY(3000) NOT NULL,
			mod_rev    BIGINT          NOT NULL,
			create_rev BIGINT          NOT NULL,
			version    BIGINT          NOT NULL,
			lease      BIGINT          NOT NULL,
			value      LONGBLOB        NOT NULL,
			PRIMARY KEY (k),
			KEY kite_live_lease (lease)
		)` + table,
		`CREATE TABLE IF NOT EXISTS kite_lease (
			id  BIGINT NOT NULL PRIMARY KEY,
			ttl BIGINT NOT NULL
		)` + table,
		// member is etcd's uint64 member ID stored through an int64 cast
		// (memberColumn), so (member, type) order is that of the signed
		// value, as in the other drivers.
		`CREATE TABLE IF NOT EXISTS kite_alarm (
			member BIGINT NOT NULL,
			type   INT    NOT NULL,
			PRIMARY KEY (member, type)
		)` + table,
		`CREATE TABLE IF NOT EXISTS kite_revision (
			id            TINYINT NOT NULL PRIMARY KEY CHECK (id = 1),
			current_rev   BIGINT  NOT NULL,
			compacted_rev BIGINT  NOT NULL
		)` + table,
		`INSERT IGNORE INTO kite_revision (id, current_rev, compacted_rev) VALUES (1, 0, 0)`,
		`CREATE TABLE IF NOT EXISTS kite_auth (
			id    TINYINT  NOT NULL PRIMARY KEY CHECK (id = 1),
			state LONGBLOB NOT NULL
		)` + table,
	}, {
		// Run again after a start that died half-way, the ALTER fails with
		// a duplicate column, which migrateTo takes as done.
		`ALTER TABLE kite_lease ADD COLUMN renewed DATETIME(6) NOT NULL DEFAULT '1970-01-01 00:00:00'`,
		`UPDATE kite_lease SET renewed = UTC_TIMESTAMP(6) WHERE renewed = '1970-01-01 00:00:00'`,
		`CREATE TABLE IF NOT EXISTS kite_server (
			name VARCHAR(64)  NOT NULL PRIMARY KEY,
			addr VARCHAR(255) NOT NULL,
			seen DATETIME(6)  NOT NULL
		)` + table,
		`CREATE TABLE IF NOT EXISTS kite_primary (
			id      TINYINT     NOT NULL PRIMARY KEY CHECK (id = 1),
			holder  VARCHAR(64) NOT NULL,
			expires DATETIME(6) NOT NULL
		)` + table,
		`INSERT IGNORE INTO kite_primary (id, holder, expires) VALUES (1, '', '1970-01-01 00:00:00')`,
		`CREATE TABLE IF NOT EXISTS kite_cluster (
			id    TINYINT     NOT NULL PRIMARY KEY CHECK (id = 1),
			token VARBINARY(64) NOT NULL
		)` + table,
	}, {
		// The server the last write went to (failover.go); NULL until a
		// write records it. A rerun's duplicate column is taken as done.
		`ALTER TABLE kite_revision ADD COLUMN writer BIGINT NULL, ADD COLUMN synced BOOLEAN NOT NULL DEFAULT FALSE`,
	}}
}

// schemaVersion is the version this code reads and writes.
func schemaVersion() int { return len(migrations()) }

// versionTable is the same in every version: it is created, and the stored
// version read, before anything else is touched.
const versionTable = `CREATE TABLE IF NOT EXISTS kite_schema (
	id      TINYINT NOT NULL PRIMARY KEY CHECK (id = 1),
	version INT     NOT NULL
) ENGINE=InnoDB ROW_FORMAT=DYNAMIC`

// MySQL's named locks are server-wide, not per database; the name carries
// a digest of the database's name (a name may be 64 characters, a lock
// name no longer than that), so kite clusters on different databases of
// one server do not wait for each other.
const (
	sqlSchemaLock   = `SELECT GET_LOCK(CONCAT('kite:schema:', SHA1(DATABASE())), ?)`
	sqlSchemaUnlock = `SELECT RELEASE_LOCK(CONCAT('kite:schema:', SHA1(DATABASE())))`
)

// schemaLockWait bounds the wait for another server's migration.
const schemaLockWait = 60 * time.Second

// migrate brings the database to schemaVersion under a named lock taken on
// one connection (a named lock belongs to its session): servers starting
// together on a new database wait for the first one instead of racing to
// create the same tables. A database written by a newer kite is refused
// rather than misread.
//
// On Galera the named lock holds on its own node only, so servers on two
// nodes may migrate at once. Every step is idempotent (IF NOT EXISTS,
// INSERT IGNORE, a duplicate column tolerated), DDL is replicated in one
// total order, and a row write that loses certification to the other
// migration's is tried again.
func migrate(ctx context.Context, db *sql.DB, log *slog.Logger) error {
	var err error
	for range 5 {
		if err = migrateTo(ctx, db, log, migrations()); !isConflict(err) {
			return err
		}
		log.Info("schema migration lost to another server's, trying again", "err", err)
	}
	return err
}

// migrateTo is migrate with the steps given: a test makes a database of an
// older version with the first steps only.
func migrateTo(ctx context.Context, db *sql.DB, log *slog.Logger, steps [][]string) (err error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("migrate schema: connect: %w", err)
	}
	defer conn.Close()
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, sqlSchemaLock, int64(schemaLockWait/time.Second)).Scan(&got); err != nil {
		return fmt.Errorf("migrate schema: take schema lock: %w", err)
	}
	if got.Int64 != 1 {
		return fmt.Errorf("migrate schema: another kite server held the schema lock for %v", schemaLockWait)
	}
	defer func() {
		var released sql.NullInt64
		if uerr := conn.QueryRowContext(context.WithoutCancel(ctx), sqlSchemaUnlock).Scan(&released); uerr != nil {
			err = errors.Join(err, fmt.Errorf("migrate schema: release schema lock: %w", uerr))
		}
	}()
	if _, err := conn.ExecContext(ctx, versionTable); err != nil {
		return fmt.Errorf("migrate schema: create version table: %w", err)
	}
	var have int
	err = conn.QueryRowContext(ctx, `SELECT version FROM kite_schema WHERE id = 1`).Scan(&have)
	switch {
	case errors.Is(err, sql.ErrNoRows): // a new database
	case err != nil:
		return fmt.Errorf("migrate schema: read version: %w", err)
	}
	want := len(steps)
	if have > want {
		return fmt.Errorf("database schema version %d is newer than this kite understands (%d): "+
			"upgrade kite, or point it at another database", have, want)
	}
	for v := have; v < want; v++ {
		for _, stmt := range steps[v] {
			if _, err := conn.ExecContext(ctx, stmt); err != nil && !isDuplicateColumn(err) {
				return fmt.Errorf("migrate schema to version %d: %w", v+1, err)
			}
		}
		if _, err := conn.ExecContext(ctx, `INSERT INTO kite_schema (id, version) VALUES (1, ?)
			ON DUPLICATE KEY UPDATE version = VALUES(version)`, v+1); err != nil {
			return fmt.Errorf("migrate schema: record version %d: %w", v+1, err)
		}
	}
	if have < want {
		log.Info("migrated schema", "from", have, "to", want)
	}
	return nil
}

// isDuplicateColumn reports an ALTER TABLE ... ADD COLUMN of a column the
// table has: a migration step that ran before (MySQL 8 has no ADD COLUMN
// IF NOT EXISTS).
func isDuplicateColumn(err error) bool {
	var me *gomysql.MySQLError
	return errors.As(err, &me) && me.Number == erDupFieldName
}
