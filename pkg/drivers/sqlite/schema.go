package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// schemaVersion is stored in meta so that a file written by an incompatible
// kite is refused instead of misread. Version 2 keys the log by position
// (ids.go); version 3 drops the table of live rows (live), whose rows the
// key index now answers, keeping only its leased keys (leased). Version 1
// files (kv keyed by (rev, sub)) are refused, not migrated; version 2 files
// are migrated at open (migrateFrom2). A kite that reads version 2 only
// refuses a version 3 file: it would find no live row for any key.
const schemaVersion = 3

// schema is the revision log and its indexes.
//
//   - kv is the log, one row per key change, keyed by its position id
//     (rev<<20 | sub, see ids.go): the rowid, so the log is a single B-tree
//     appended at its right edge, and revision order is id order. deleted
//     sits before value so that reading the flag of a row with a large value
//     never walks the value's overflow pages; so do the columns a read
//     without values (keys only, a count, a put's look at the row it
//     replaces) needs.
//   - the log has no index on key: every read by key, latest or
//     historical, the previous rows and the compaction find a key's rows
//     through the key index, which is held in memory and rebuilt from kv at
//     open (keyindex.go), and then read the row by id. Files written before
//     it had an index kv_key, which migrate drops, and a table live of the
//     newest row of each key, which migrateFrom2 drops. One revision may
//     hold two rows of a key (a txn can delete a key through a from-key
//     range and put it again); their ids differ by sub.
//   - leased holds the live keys that have a lease, by lease then key, for
//     LeaseKeys (a revoke deletes them, TimeToLive lists them). Keys without
//     a lease (most of them) are not in it, so a put of such a key writes
//     nothing but its kv row, unless the key had a lease before. The writer
//     knows which keys are in it (Backend.leased).
var schema = []string{
	`CREATE TABLE IF NOT EXISTS kv (
		id         INTEGER NOT NULL PRIMARY KEY,
		key        BLOB    NOT NULL,
		create_rev INTEGER NOT NULL,
		version    INTEGER NOT NULL,
		lease      INTEGER NOT NULL,
		deleted    INTEGER NOT NULL,
		value      BLOB    NOT NULL
	)`,
	`DROP INDEX IF EXISTS kv_key`,
	`CREATE TABLE IF NOT EXISTS leased (
		lease INTEGER NOT NULL,
		key   BLOB    NOT NULL,
		PRIMARY KEY (lease, key)
	) WITHOUT ROWID`,
	`CREATE TABLE IF NOT EXISTS lease (
		id  INTEGER NOT NULL PRIMARY KEY,
		ttl INTEGER NOT NULL
	)`,
	// Active alarms (NOSPACE, ...) survive a restart, as etcd's do.
	`CREATE TABLE IF NOT EXISTS alarm (
		member INTEGER NOT NULL,
		type   INTEGER NOT NULL,
		PRIMARY KEY (member, type)
	) WITHOUT ROWID`,
}

// migrateFrom2 turns a version 2 file into version 3, inside migrate's
// transaction: the leased keys of live move to leased, and live (with its
// index live_leased) goes. Every other table is the same in both.
var migrateFrom2 = []string{
	`CREATE TABLE leased (
		lease INTEGER NOT NULL,
		key   BLOB    NOT NULL,
		PRIMARY KEY (lease, key)
	) WITHOUT ROWID`,
	`INSERT INTO leased (lease, key) SELECT lease, key FROM live WHERE lease != 0`,
	`DROP TABLE live`,
	`UPDATE meta SET value = 3 WHERE name = 'schema_version'`,
}

// metaTable is the same in every schema version: it is created first, and
// the stored version read, before anything else is touched. Its rows are
// named: 'current' and 'compacted' (the revisions), 'schema_version',
// 'raft_applied_index' (raftsql) and 'auth'.
//
// 'auth' holds the authentication state (mvcc.WriteTx.PutAuthState) as a
// BLOB, although value is declared INTEGER. The table is not STRICT, so the
// declaration only gives the column INTEGER affinity, and affinity converts
// TEXT and REAL values, never a BLOB: a BLOB is stored as given, whatever
// bytes it holds ("123" included). This holds in a WITHOUT ROWID table as in
// any other: only a rowid table's INTEGER PRIMARY KEY column is special, and
// meta's key is the TEXT name. TestAuthStateIsBlob checks it. A large state
// lives in the row's overflow pages, which the lookups of the other rows
// never read. Every row is read by name, never all of meta at once, so the
// row needs no schema change: a file written before it existed opens as it
// is (no row: no state, until the first PutAuthState); the row came
// with version 2 and needed no new version.
const metaTable = `CREATE TABLE IF NOT EXISTS meta (
		name  TEXT    NOT NULL PRIMARY KEY,
		value INTEGER NOT NULL
	) WITHOUT ROWID`

// initMeta gives a new database its revisions and schema version; on an
// existing one it changes nothing.
const initMeta = `INSERT INTO meta (name, value) VALUES
	('current', 0), ('compacted', 0), ('schema_version', ?)
	ON CONFLICT (name) DO NOTHING`

// migrate creates the schema in one transaction, so a crash during the
// first open leaves either no tables or all of them, and checks that an
// existing file has the version this code understands.
func migrate(ctx context.Context, conn *sql.Conn) (err error) {
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return fmt.Errorf("begin schema transaction: %w", err)
	}
	defer func() {
		if err != nil {
			_, rbErr := conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
			err = errors.Join(err, rbErr)
		}
	}()
	if _, err := conn.ExecContext(ctx, metaTable); err != nil {
		return fmt.Errorf("create schema: %w", err)
	}
	var v int64
	err = conn.QueryRowContext(ctx, `SELECT value FROM meta WHERE name = 'schema_version'`).Scan(&v)
	switch {
	case errors.Is(err, sql.ErrNoRows): // a new database
		err = nil
	case err != nil:
		return fmt.Errorf("read schema version: %w", err)
	case v == 2:
		for _, stmt := range migrateFrom2 {
			if _, err := conn.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("migrate schema version 2 to 3: %w", err)
			}
		}
	case v != schemaVersion:
		return fmt.Errorf("database schema version %d, this kite reads version %d only "+
			"(no migration: copy the keys with an etcd client from a kite of the file's version)", v, schemaVersion)
	}
	for _, stmt := range schema {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("create schema: %w", err)
		}
	}
	if _, err := conn.ExecContext(ctx, initMeta, schemaVersion); err != nil {
		return fmt.Errorf("initialise meta: %w", err)
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return fmt.Errorf("commit schema: %w", err)
	}
	return nil
}
