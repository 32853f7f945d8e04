package mysql

import "strings"

// Every statement is a constant string, or one of a few variants built once
// per Backend. Arguments are interpolated by the driver (dsn.go), so each
// statement is one round trip and none is prepared.

const (
	// The revisions come with the record of the server the last write
	// went to, and the server of now (failover.go).
	sqlRevisions     = `SELECT current_rev, compacted_rev, ` + sqlRevisionRecord + ` FROM kite_revision WHERE id = 1`
	sqlLockRevisions = sqlRevisions + ` FOR UPDATE`
	sqlSetRevisions  = `UPDATE kite_revision SET current_rev = ?, compacted_rev = ?, writer = @@server_id, synced = ? WHERE id = 1`

	// The isolation level is named for each transaction (SET TRANSACTION
	// applies to the next one only), so a session default set by the DSN,
	// the server or an earlier user of the connection never decides it.
	// A read takes its snapshot at START, before the revisions are read.
	sqlBeginRead  = `SET TRANSACTION ISOLATION LEVEL REPEATABLE READ; START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY`
	sqlBeginWrite = `SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION READ WRITE`

	sqlGet = `SELECT k, create_rev, mod_rev, version, lease, value FROM kite_live WHERE k = ?`
	// One statement is one snapshot under autocommit: the revisions
	// always come back, the row's columns are NULL (0) for a missing key.
	sqlGetLatest = `SELECT r.current_rev, r.compacted_rev, r.writer, r.synced, @@server_id, l.k, COALESCE(l.create_rev, 0),
		COALESCE(l.mod_rev, 0), COALESCE(l.version, 0), COALESCE(l.lease, 0), l.value
		FROM kite_revision AS r LEFT JOIN kite_live AS l ON l.k = ? WHERE r.id = 1`

	sqlLeases    = `SELECT id, ttl FROM kite_lease ORDER BY id`
	sqlLease     = `SELECT ttl FROM kite_lease WHERE id = ?`
	sqlAlarms    = `SELECT member, type FROM kite_alarm ORDER BY member, type`
	sqlLeaseKeys = `SELECT k FROM kite_live WHERE lease = ? ORDER BY k`
	sqlAuthState = `SELECT state FROM kite_auth WHERE id = 1`

	// Row lists of these are appended by the pending writes (write.go).
	sqlInsertLog  = `INSERT INTO kite_log (rev, sub, k, create_rev, version, lease, deleted, value) VALUES `
	rowInsertLog  = `(?, ?, ?, ?, ?, ?, ?, ?)`
	sqlUpsertLive = `INSERT INTO kite_live (k, mod_rev, create_rev, version, lease, value) VALUES `
	rowUpsertLive = `(?, ?, ?, ?, ?, ?)`
	// VALUES(col) is the one spelling MySQL and MariaDB both accept.
	sqlUpsertLiveEnd = ` ON DUPLICATE KEY UPDATE mod_rev = VALUES(mod_rev), create_rev = VALUES(create_rev),
		version = VALUES(version), lease = VALUES(lease), value = VALUES(value)`
	sqlDeleteLive = `DELETE FROM kite_live WHERE k IN `

	sqlPutAuthState = `INSERT INTO kite_auth (id, state) VALUES (1, ?) ON DUPLICATE KEY UPDATE state = VALUES(state)`
	// A grant starts the lease's clock.
	sqlPutLease = `INSERT INTO kite_lease (id, ttl, renewed) VALUES (?, ?, UTC_TIMESTAMP(6))
		ON DUPLICATE KEY UPDATE ttl = VALUES(ttl), renewed = VALUES(renewed)`
	// sqlRenewLease records a keep-alive outside any transaction: the row
	// is locked for the statement only, so a revoking transaction that has
	// checked the lease (sqlLeaseExpired) makes it wait, then find no row.
	sqlRenewLease = `UPDATE kite_lease SET renewed = UTC_TIMESTAMP(6) WHERE id = ?`
	// sqlLeaseExpired locks the lease row for the rest of the write
	// transaction; under READ COMMITTED a locking read sees the newest
	// committed renewal, waiting for one in flight. The clock is read when
	// the statement starts, before any such wait: a renewal the wait lets
	// through is newer than it, and the lease is not expired.
	sqlLeaseExpired = `SELECT UTC_TIMESTAMP(6) >= TIMESTAMPADD(SECOND, ttl, renewed)
		FROM kite_lease WHERE id = ? FOR UPDATE`
	sqlDeleteLease = `DELETE FROM kite_lease WHERE id = ?`
	sqlPutAlarm    = `INSERT IGNORE INTO kite_alarm (member, type) VALUES (?, ?)`
	sqlDeleteAlarm = `DELETE FROM kite_alarm WHERE member = ? AND type = ?`

	// Compaction first finds the rows to remove, then deletes them by
	// primary key: MySQL refuses a DELETE whose subquery reads the table
	// it deletes from, and the revision lock keeps the log still between
	// the two. The revision range walks the primary key; the newer-row
	// probes are seeks in kite_log_key (forced: the primary key would
	// serve "same revision" by walking every row of a revision, which a
	// DeleteRange of many keys makes long). Placeholders: from, to,
	// compacted, compacted. A row goes when it is a tombstone at or below
	// compacted, or a newer row of its key exists at or below compacted
	// (a later revision, or a later sub-revision of the same one).
	sqlCompactFind = `SELECT l.rev, l.sub FROM kite_log AS l
		WHERE l.rev >= ? AND l.rev <= ? AND l.rev <= ?
		AND (l.deleted
			OR EXISTS (SELECT 1 FROM kite_log AS n FORCE INDEX (kite_log_key)
				WHERE n.k = l.k AND n.rev > l.rev AND n.rev <= ?)
			OR EXISTS (SELECT 1 FROM kite_log AS n FORCE INDEX (kite_log_key)
				WHERE n.k = l.k AND n.rev = l.rev AND n.sub > l.sub))
		ORDER BY l.rev, l.sub`
	sqlCompactDelete = `DELETE FROM kite_log WHERE (rev, sub) IN `
)

// sqlChanges reads the log in (rev, sub) order between two revisions.
// Placeholders: from, to.
const sqlChanges = `SELECT rev, sub, k, create_rev, version, lease, deleted, value
	FROM kite_log WHERE rev >= ? AND rev <= ? ORDER BY rev, sub`

// sqlPrevBranch finds the rows of a key at its newest revision below
// another (one or two rows: a tombstone and a put may share a revision),
// one branch of a UNION ALL per change whose previous row is not among
// the changes read (history.go). Every value is a constant, so the MAX is
// one index dive and the rows one seek; a correlated subquery would walk
// the key's history instead, which MySQL and MariaDB never bound by a
// revision taken from the outer row. Placeholders: the change's index,
// the key, the key, the change's revision.
const sqlPrevBranch = `(SELECT ? AS i, h.sub, h.rev, h.create_rev, h.version, h.lease, h.deleted, h.value
	FROM kite_log AS h FORCE INDEX (kite_log_key)
	WHERE h.k = ? AND h.rev = (SELECT MAX(x.rev) FROM kite_log AS x WHERE x.k = ? AND x.rev < ?))`

// queries holds the Range and Count variants, built once per Backend.
type queries struct {
	ranges [8]string // latest reads, by rangeIndex
	counts [2]string // latest counts, by b2i(open)
	hist   [4]string // historical pages, by histIndex
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// rangeIndex picks the latest Range variant: an open range ("\x00" end)
// has no upper bound in its SQL rather than a sentinel, so the index range
// stays tight; keys-only variants never read values; a limit of 0 has no
// LIMIT.
func rangeIndex(open, keysOnly, limited bool) int {
	return 4*b2i(open) + 2*b2i(keysOnly) + b2i(limited)
}

func histIndex(open, keysOnly bool) int { return 2*b2i(open) + b2i(keysOnly) }

func newQueries() *queries {
	q := &queries{}
	for _, open := range []bool{false, true} {
		for _, keysOnly := range []bool{false, true} {
			for _, limited := range []bool{false, true} {
				q.ranges[rangeIndex(open, keysOnly, limited)] = latestSQL(open, keysOnly, limited, false)
			}
			q.hist[histIndex(open, keysOnly)] = histSQL(open, keysOnly)
		}
		q.counts[b2i(open)] = latestSQL(open, true, false, true)
	}
	return q
}

// latestSQL builds one latest Range or Count variant, which walks
// kite_live's primary key in key order and stops at the limit.
// Placeholders, in order: the start key, the end key (bounded variants)
// and the limit (limited).
func latestSQL(open, keysOnly, limited, count bool) string {
	cols := "k, create_rev, mod_rev, version, lease"
	if !keysOnly {
		cols += ", value"
	}
	if count {
		cols = "COUNT(*)"
	}
	var b strings.Builder
	b.WriteString("SELECT " + cols + " FROM kite_live WHERE k >= ?")
	if !open {
		b.WriteString(" AND k < ?")
	}
	if !count {
		b.WriteString(" ORDER BY k")
	}
	if limited && !count {
		b.WriteString(" LIMIT ?")
	}
	return b.String()
}

// histSQL builds a page of a historical read: the newest revision at or
// below the read's of each of the next keys of the range, found by one
// walk of kite_log_key in key order that stops after the page's keys (the
// GROUP BY follows the index, so there is no sort), and the rows of each
// key at that revision (one or two: a tombstone and a put may share it),
// one seek each. Tombstones come back too, so that the caller can tell a
// page that ran out of keys from one whose keys were deleted
// (history.go). Placeholders: the start key, the end key (bounded), the
// revision, the page's keys.
func histSQL(open, keysOnly bool) string {
	cols := "l.k, l.create_rev, l.rev, l.version, l.lease, l.sub, l.deleted"
	if !keysOnly {
		cols += ", l.value"
	}
	var b strings.Builder
	b.WriteString("SELECT " + cols + " FROM (SELECT k, MAX(rev) AS rev FROM kite_log FORCE INDEX (kite_log_key) WHERE k >= ?")
	if !open {
		b.WriteString(" AND k < ?")
	}
	b.WriteString(" AND rev <= ? GROUP BY k ORDER BY k LIMIT ?) AS m" +
		" JOIN kite_log AS l FORCE INDEX (kite_log_key) ON l.k = m.k AND l.rev = m.rev")
	return b.String()
}
