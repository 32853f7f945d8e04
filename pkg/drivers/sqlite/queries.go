package sqlite

import "strings"

// stmtID names a prepared statement. Every statement is prepared once per
// connection and reused by every transaction: parsing and planning SQL per
// call would cost more than executing it.
type stmtID int

const (
	qRevisions stmtID = iota
	qGet
	qGetMeta
	qGetLatest
	qChanges
	qRowsByID
	qRowsByIDKeysOnly
	qLeases
	qLease
	qLeaseKeys
	qAlarms
	qUnleasedKeys
	qSnapshotState
	qAuthState
	// qRange is the first of four range variants, see rangeID.
	qRange
	_
	_
	_
	// qCount is the first of two count variants, see countID.
	qCount
	_

	// Statements from here on change the database and exist only on the
	// writer connection.
	qInsertPut
	qInsertTombstone
	qUpsertLive
	qDeleteLive
	qSetRevisions
	qSetAppliedIndex
	qPutLease
	qDeleteLease
	qPutAlarm
	qDeleteAlarm
	qPutAuthState
	qCompactCandidates
	qDeleteRows
	qBegin
	qCommit
	qRollback
	numStmts
)

// firstWrite separates the statements the read pool prepares from the
// writer-only ones.
const firstWrite = qInsertPut

// param is one bind argument of a statement; a variant lists its params in
// placeholder order so callers bind by meaning, not by position.
type param int

const (
	pFrom param = iota
	pTo
	pRev // bound as lastID(rev): a row is visible at rev when its id is <= that
	pLimit
)

type statement struct {
	sql    string
	params []param
}

func b2i(b bool) stmtID {
	if b {
		return 1
	}
	return 0
}

// rangeID picks the variant of a latest Range, read from live (historical
// ones find their rows through the key index, keyindex.go): open ranges
// ("\x00" end) have no upper bound, which must be absent from the SQL
// rather than a sentinel so the index range stays tight; keys-only
// variants never join the value.
func rangeID(open, keysOnly bool) stmtID {
	return qRange + 2*b2i(open) + b2i(keysOnly)
}

func countID(open bool) stmtID {
	return qCount + b2i(open)
}

// The SQL below turns an id into its revision with "id >> 20": subBits.
const _ = uint(subBits-20) + uint(20-subBits) // does not compile unless subBits == 20

// statements returns the SQL of every statement, indexed by stmtID.
func statements() []statement {
	s := make([]statement, numStmts)
	s[qRevisions] = statement{sql: `SELECT
		IFNULL((SELECT value FROM meta WHERE name = 'current'), 0),
		IFNULL((SELECT value FROM meta WHERE name = 'compacted'), 0)`}
	// A read transaction's first statement, which takes its snapshot: the
	// revisions and the applied index at once (three rows of one meta
	// page), so that a reader merging a tail over it (memtail) asks
	// nothing more before its first row.
	s[qSnapshotState] = statement{sql: `SELECT
		IFNULL((SELECT value FROM meta WHERE name = 'current'), 0),
		IFNULL((SELECT value FROM meta WHERE name = 'compacted'), 0),
		IFNULL((SELECT value FROM meta WHERE name = 'raft_applied_index'), 0)`}
	// The authentication state is the BLOB in meta's 'auth' row (see
	// metaTable): absent until the first PutAuthState.
	s[qAuthState] = statement{sql: `SELECT value FROM meta WHERE name = 'auth'`}
	s[qGet] = statement{sql: `SELECT l.key, l.create_rev, l.id >> 20, l.version, l.lease, kv.value
		FROM live AS l CROSS JOIN kv ON kv.id = l.id
		WHERE l.key = ?`, params: []param{pFrom}}
	// A live row without its value never touches the log (mvcc.RowMetaReader).
	s[qGetMeta] = statement{sql: `SELECT key, create_rev, id >> 20, version, lease
		FROM live WHERE key = ?`, params: []param{pFrom}}
	// One statement, hence one snapshot, for a latest single-key read: the
	// revisions always come back, the row's columns are NULL for a missing
	// key.
	s[qGetLatest] = statement{sql: `SELECT
		IFNULL((SELECT value FROM meta WHERE name = 'current'), 0),
		IFNULL((SELECT value FROM meta WHERE name = 'compacted'), 0),
		l.key, l.create_rev, l.id >> 20, l.version, l.lease, kv.value
		FROM (VALUES (?)) AS k LEFT JOIN live AS l ON l.key = k.column1
		LEFT JOIN kv ON kv.id = l.id`, params: []param{pFrom}}
	// The log in id order, that is (rev, sub) order, between two ids.
	s[qChanges] = statement{sql: `SELECT id, key, create_rev, version, lease, deleted, value
		FROM kv WHERE id >= ? AND id <= ? ORDER BY id LIMIT ?`, params: []param{pFrom, pTo, pLimit}}
	// Rows by id, the ids given as a JSON array (rowsByID): one statement
	// per page of a historical read instead of one per row. SQLite walks
	// the array and seeks each id in kv's rowid.
	s[qRowsByID] = statement{sql: `SELECT kv.id, kv.key, kv.create_rev, kv.version, kv.lease, kv.value
		FROM json_each(?) AS j CROSS JOIN kv ON kv.id = j.value`}
	s[qRowsByIDKeysOnly] = statement{sql: `SELECT kv.id, kv.key, kv.create_rev, kv.version, kv.lease
		FROM json_each(?) AS j CROSS JOIN kv ON kv.id = j.value`}
	s[qLeases] = statement{sql: `SELECT id, ttl FROM lease ORDER BY id`}
	s[qLease] = statement{sql: `SELECT ttl FROM lease WHERE id = ?`, params: []param{pFrom}}
	s[qAlarms] = statement{sql: `SELECT member, type FROM alarm ORDER BY member, type`}
	// "lease != 0" lets SQLite use the partial index live_leased.
	s[qLeaseKeys] = statement{sql: `SELECT key FROM live WHERE lease = ? AND lease != 0 ORDER BY key`,
		params: []param{pRev}}
	// The keys without a lease are not in live_leased: a walk of live. The
	// server never asks for them (lease 0 is no lease).
	s[qUnleasedKeys] = statement{sql: `SELECT key FROM live WHERE lease = 0 ORDER BY key`}
	for _, open := range []bool{false, true} {
		for _, keysOnly := range []bool{false, true} {
			s[rangeID(open, keysOnly)] = rangeSQL(open, keysOnly, false)
		}
		s[countID(open)] = rangeSQL(open, true, true)
	}

	s[qInsertPut] = statement{sql: `INSERT INTO kv
		(id, key, create_rev, version, lease, deleted, value)
		VALUES (?, ?, ?, ?, ?, 0, ?)`}
	s[qInsertTombstone] = statement{sql: `INSERT INTO kv
		(id, key, create_rev, version, lease, deleted, value)
		VALUES (?, ?, 0, 0, 0, 1, x'')`}
	s[qUpsertLive] = statement{sql: `INSERT INTO live (key, id, create_rev, version, lease)
		VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (key) DO UPDATE SET id = excluded.id,
			create_rev = excluded.create_rev, version = excluded.version,
			lease = excluded.lease`}
	s[qDeleteLive] = statement{sql: `DELETE FROM live WHERE key = ?`}
	s[qSetRevisions] = statement{sql: `INSERT INTO meta (name, value)
		VALUES ('current', ?), ('compacted', ?)
		ON CONFLICT (name) DO UPDATE SET value = excluded.value`}
	s[qSetAppliedIndex] = statement{sql: `INSERT INTO meta (name, value)
		VALUES ('raft_applied_index', ?)
		ON CONFLICT (name) DO UPDATE SET value = excluded.value`}
	s[qPutAuthState] = statement{sql: `INSERT INTO meta (name, value) VALUES ('auth', ?)
		ON CONFLICT (name) DO UPDATE SET value = excluded.value`}
	s[qPutLease] = statement{sql: `INSERT INTO lease (id, ttl) VALUES (?, ?)
		ON CONFLICT (id) DO UPDATE SET ttl = excluded.ttl`}
	s[qDeleteLease] = statement{sql: `DELETE FROM lease WHERE id = ?`}
	s[qPutAlarm] = statement{sql: `INSERT INTO alarm (member, type) VALUES (?, ?)
		ON CONFLICT (member, type) DO NOTHING`}
	s[qDeleteAlarm] = statement{sql: `DELETE FROM alarm WHERE member = ? AND type = ?`}
	// A compaction step reads the rows of its revisions (an id range of
	// the log's rowid, bounded by the compacted revision, so a step stays
	// proportional to its revisions), judges each against the key index
	// and deletes the superseded ones by id.
	s[qCompactCandidates] = statement{sql: `SELECT id, key, deleted FROM kv
		WHERE id >= ?1 AND id <= ?2 AND id <= ?3`}
	s[qDeleteRows] = statement{sql: `DELETE FROM kv WHERE id IN (SELECT value FROM json_each(?))`}
	// IMMEDIATE takes the write lock at BEGIN, so a conflict with another
	// process surfaces here (after busy_timeout) instead of at the first
	// write, halfway through a batch.
	s[qBegin] = statement{sql: `BEGIN IMMEDIATE`}
	s[qCommit] = statement{sql: `COMMIT`}
	s[qRollback] = statement{sql: `ROLLBACK`}
	return s
}

// rangeSQL builds one latest Range or Count variant: a scan of live in
// key order with LIMIT pushed into SQL.
func rangeSQL(open, keysOnly, count bool) statement {
	var b strings.Builder
	params := []param{pFrom}
	cols := "SELECT COUNT(*)"
	if !count {
		cols = "SELECT t.key, t.create_rev, t.id >> 20, t.version, t.lease"
		if !keysOnly {
			cols += ", kv.value"
		}
	}
	b.WriteString(cols + " FROM live AS t")
	if !keysOnly {
		b.WriteString(" CROSS JOIN kv ON kv.id = t.id")
	}
	b.WriteString(" WHERE t.key >= ?")
	if !open {
		b.WriteString(" AND t.key < ?")
		params = append(params, pTo)
	}
	if !count {
		b.WriteString(" ORDER BY t.key LIMIT ?")
		params = append(params, pLimit)
	}
	return statement{sql: b.String(), params: params}
}
