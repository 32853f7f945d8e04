package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// schemaVersion is stored in meta so that a file written by an incompatible
// kite is refused instead of misread. Version 2 keys the log by position
// (ids.go); version 1 files (kv keyed by (rev, sub)) are refused, not
// migrated.
const schemaVersion = 2

// schema is the revision log and its indexes.
//
//   - kv is the log, one row per key change, keyed by its position id
//     (rev<<20 | sub, see ids.go): the rowid, so the log is a single B-tree
//     appended at its right edge, and revision order is id order. deleted
//     sits before value so that reading the flag of a row with a large value
//     never walks the value's overflow pages.
//   - the log has no index on key: historical reads, previous rows and the
//     compaction find a key's rows through the key index, which is held in
//     memory and rebuilt from kv at open (keyindex.go). Files written
//     before it had an index kv_key, which migrate drops (a kite of that
//     time opening the file again creates it again: the schema version is
//     the same). One revision may hold two rows of a key (a txn can delete
//     a key through a from-key range and put it again); their ids differ
//     by sub.
//   - live holds the newest non-tombstone row of each key without its value,
//     so latest reads, counts and keys-only ranges never touch the log; its
//     id finds the value with one rowid seek.
//   - live_leased serves LeaseKeys; a WITHOUT ROWID secondary index already
//     carries the key, so its order is (lease, key). It is partial: keys
//     without a lease (most of them) are not in it, so a put of such a key
//     does not write a page of it.
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
	`CREATE TABLE IF NOT EXISTS live (
		key        BLOB    NOT NULL PRIMARY KEY,
		id         INTEGER NOT NULL,
		create_rev INTEGER NOT NULL,
		version    INTEGER NOT NULL,
		lease      INTEGER NOT NULL
	) WITHOUT ROWID`,
	`CREATE INDEX IF NOT EXISTS live_leased ON live (lease) WHERE lease != 0`,
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
// is (no row: no state, until the first PutAuthState), and schema_version
// stays 2.
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
