package sqlite

// stmtID names a prepared statement. Every statement is prepared once per
// connection and reused by every transaction: parsing and planning SQL per
// call would cost more than executing it.
type stmtID int

const (
	qRevisions stmtID = iota
	qRowByID
	qRowMetaByID
	qGetLatest
	qChanges
	qRowsByID
	qRowsByIDKeysOnly
	qLeases
	qLease
	qLeaseKeys
	qLeasedKeys
	qAlarms
	qSnapshotState
	qAuthState

	// Statements from here on change the database and exist only on the
	// writer connection.
	qInsertPut
	qInsertTombstone
	qPutLeased
	qDeleteLeased
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

// statements returns the SQL of every statement, indexed by stmtID.
func statements() []string {
	s := make([]string, numStmts)
	s[qRevisions] = `SELECT
		IFNULL((SELECT value FROM meta WHERE name = 'current'), 0),
		IFNULL((SELECT value FROM meta WHERE name = 'compacted'), 0)`
	// A read transaction's first statement, which takes its snapshot: the
	// revisions and the applied index at once (three rows of one meta
	// page), so that a reader merging a tail over it (memtail) asks
	// nothing more before its first row.
	s[qSnapshotState] = `SELECT
		IFNULL((SELECT value FROM meta WHERE name = 'current'), 0),
		IFNULL((SELECT value FROM meta WHERE name = 'compacted'), 0),
		IFNULL((SELECT value FROM meta WHERE name = 'raft_applied_index'), 0)`
	// The authentication state is the BLOB in meta's 'auth' row (see
	// metaTable): absent until the first PutAuthState.
	s[qAuthState] = `SELECT value FROM meta WHERE name = 'auth'`
	// One row, by the id the key index names; the columns before value
	// only, for a read that needs no value (mvcc.RowMetaReader).
	s[qRowByID] = `SELECT key, create_rev, version, lease, value
		FROM kv WHERE id = ?`
	s[qRowMetaByID] = `SELECT key, create_rev, version, lease
		FROM kv WHERE id = ?`
	// One statement, hence one snapshot, for a latest single-key read
	// (GetLatest): the revisions always come back, the row's columns are
	// NULL when the snapshot has no row of that id.
	s[qGetLatest] = `SELECT
		IFNULL((SELECT value FROM meta WHERE name = 'current'), 0),
		IFNULL((SELECT value FROM meta WHERE name = 'compacted'), 0),
		kv.key, kv.create_rev, kv.version, kv.lease, kv.value
		FROM (VALUES (?)) AS k LEFT JOIN kv ON kv.id = k.column1`
	// The log in id order, that is (rev, sub) order, between two ids.
	s[qChanges] = `SELECT id, key, create_rev, version, lease, deleted, value
		FROM kv WHERE id >= ? AND id <= ? ORDER BY id LIMIT ?`
	// Rows by id, the ids given as a JSON array (rowsByID): one statement
	// per page of a range instead of one per row. SQLite walks
	// the array and seeks each id in kv's rowid.
	s[qRowsByID] = `SELECT kv.id, kv.key, kv.create_rev, kv.version, kv.lease, kv.value
		FROM json_each(?) AS j CROSS JOIN kv ON kv.id = j.value`
	s[qRowsByIDKeysOnly] = `SELECT kv.id, kv.key, kv.create_rev, kv.version, kv.lease
		FROM json_each(?) AS j CROSS JOIN kv ON kv.id = j.value`
	s[qLeases] = `SELECT id, ttl FROM lease ORDER BY id`
	s[qLease] = `SELECT ttl FROM lease WHERE id = ?`
	s[qAlarms] = `SELECT member, type FROM alarm ORDER BY member, type`
	s[qLeaseKeys] = `SELECT key FROM leased WHERE lease = ? ORDER BY key`
	// Every leased key: what the writer loads at open (Backend.leased), and
	// what LeaseKeys(0) leaves out of the live keys.
	s[qLeasedKeys] = `SELECT key, lease FROM leased`

	s[qInsertPut] = `INSERT INTO kv
		(id, key, create_rev, version, lease, deleted, value)
		VALUES (?, ?, ?, ?, ?, 0, ?)`
	s[qInsertTombstone] = `INSERT INTO kv
		(id, key, create_rev, version, lease, deleted, value)
		VALUES (?, ?, 0, 0, 0, 1, x'')`
	s[qPutLeased] = `INSERT INTO leased (lease, key) VALUES (?, ?)
		ON CONFLICT (lease, key) DO NOTHING`
	s[qDeleteLeased] = `DELETE FROM leased WHERE lease = ? AND key = ?`
	s[qSetRevisions] = `INSERT INTO meta (name, value)
		VALUES ('current', ?), ('compacted', ?)
		ON CONFLICT (name) DO UPDATE SET value = excluded.value`
	s[qSetAppliedIndex] = `INSERT INTO meta (name, value)
		VALUES ('raft_applied_index', ?)
		ON CONFLICT (name) DO UPDATE SET value = excluded.value`
	s[qPutAuthState] = `INSERT INTO meta (name, value) VALUES ('auth', ?)
		ON CONFLICT (name) DO UPDATE SET value = excluded.value`
	s[qPutLease] = `INSERT INTO lease (id, ttl) VALUES (?, ?)
		ON CONFLICT (id) DO UPDATE SET ttl = excluded.ttl`
	s[qDeleteLease] = `DELETE FROM lease WHERE id = ?`
	s[qPutAlarm] = `INSERT INTO alarm (member, type) VALUES (?, ?)
		ON CONFLICT (member, type) DO NOTHING`
	s[qDeleteAlarm] = `DELETE FROM alarm WHERE member = ? AND type = ?`
	// A compaction step reads the rows of its revisions (an id range of
	// the log's rowid, bounded by the compacted revision, so a step stays
	// proportional to its revisions), judges each against the key index
	// and deletes the superseded ones by id.
	s[qCompactCandidates] = `SELECT id, key, deleted FROM kv
		WHERE id >= ?1 AND id <= ?2 AND id <= ?3`
	s[qDeleteRows] = `DELETE FROM kv WHERE id IN (SELECT value FROM json_each(?))`
	// IMMEDIATE takes the write lock at BEGIN, so a conflict with another
	// process surfaces here (after busy_timeout) instead of at the first
	// write, halfway through a batch.
	s[qBegin] = `BEGIN IMMEDIATE`
	s[qCommit] = `COMMIT`
	s[qRollback] = `ROLLBACK`
	return s
}
