package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// schemaVersion is stored in meta so that a file written by an incompatible
// kite is refused instead of misread.
const schemaVersion = 1

// schema is the revision log and its indexes.
//
//   - kv is the log, one row per key change, a rowid table in (rev, sub)
//     order. deleted sits before value so that reading the flag of a row
//     with a large value never walks the value's overflow pages.
//   - kv_key_rev serves historical reads: per key, the newest row at or
//     below a revision is one index seek. sub is part of it because one
//     revision may hold two rows of a key: a txn can delete a key through a
//     from-key range and put it again (etcd's duplicate check allows it).
//   - live holds the newest non-tombstone row of each key without its value,
//     so latest reads, counts and keys-only ranges never touch the log; its
//     (rev, sub) finds the value by the log's primary key.
//   - live_leased serves LeaseKeys; a WITHOUT ROWID secondary index already
//     carries the key, so its order is (lease, key). It is partial: keys
//     without a lease (most of them) are not in it, so a put of such a key
//     does not write a page of it. live_lease, its full predecessor, is
//     dropped; the files stay readable by either version.
var schema = []string{
	`CREATE TABLE IF NOT EXISTS kv (
		rev        INTEGER NOT NULL,
		sub        INTEGER NOT NULL,
		key        BLOB    NOT NULL,
		create_rev INTEGER NOT NULL,
		version    INTEGER NOT NULL,
		lease      INTEGER NOT NULL,
		deleted    INTEGER NOT NULL,
		value      BLOB    NOT NULL,
		PRIMARY KEY (rev, sub)
	)`,
	`CREATE UNIQUE INDEX IF NOT EXISTS kv_key_rev ON kv (key, rev, sub)`,
	`CREATE TABLE IF NOT EXISTS live (
		key        BLOB    NOT NULL PRIMARY KEY,
		rev        INTEGER NOT NULL,
		sub        INTEGER NOT NULL,
		create_rev INTEGER NOT NULL,
		version    INTEGER NOT NULL,
		lease      INTEGER NOT NULL
	) WITHOUT ROWID`,
	`DROP INDEX IF EXISTS live_lease`,
	`CREATE INDEX IF NOT EXISTS live_leased ON live (lease) WHERE lease != 0`,
	`CREATE TABLE IF NOT EXISTS meta (
		name  TEXT    NOT NULL PRIMARY KEY,
		value INTEGER NOT NULL
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
	for _, stmt := range schema {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("create schema: %w", err)
		}
	}
	if _, err := conn.ExecContext(ctx, initMeta, schemaVersion); err != nil {
		return fmt.Errorf("initialise meta: %w", err)
	}
	var v int64
	err = conn.QueryRowContext(ctx, `SELECT value FROM meta WHERE name = 'schema_version'`).Scan(&v)
	if err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if v != schemaVersion {
		return fmt.Errorf("database schema version %d, this kite reads version %d", v, schemaVersion)
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return fmt.Errorf("commit schema: %w", err)
	}
	return nil
}
