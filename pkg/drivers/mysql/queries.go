package mysql

import "strings"

// Every statement is a constant string, or one of a few variants built once
// per Backend. Arguments are interpolated by the driver (dsn.go), so each
// statement is one round trip and none is prepared.

const (
	sqlRevisions     = `SELECT current_rev, compacted_rev FROM kite_revision WHERE id = 1`
	sqlLockRevisions = sqlRevisions + ` FOR UPDATE`
	sqlSetRevisions  = `UPDATE kite_revision SET current_rev = ?, compacted_rev = ? WHERE id = 1`

	// The isolation level is named for each transaction (SET TRANSACTION
	// applies to the next one only), so a session default set by the DSN,
	// the server or an earlier user of the connection never decides it.
	// A read takes its snapshot at START, before the revisions are read.
	sqlBeginRead  = `SET TRANSACTION ISOLATION LEVEL REPEATABLE READ; START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY`
	sqlBeginWrite = `SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION READ WRITE`

	sqlGet = `SELECT k, create_rev, mod_rev, version, lease, value FROM kite_live WHERE k = ?`
	// One statement is one snapshot under autocommit: the revisions
	// always come back, the row's columns are NULL (0) for a missing key.
	sqlGetLatest = `SELECT r.current_rev, r.compacted_rev, l.k, COALESCE(l.create_rev, 0),
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
	sqlPutLease     = `INSERT INTO kite_lease (id, ttl) VALUES (?, ?) ON DUPLICATE KEY UPDATE ttl = VALUES(ttl)`
	sqlDeleteLease  = `DELETE FROM kite_lease WHERE id = ?`
	sqlPutAlarm     = `INSERT IGNORE INTO kite_alarm (member, type) VALUES (?, ?)`
	sqlDeleteAlarm  = `DELETE FROM kite_alarm WHERE member = ? AND type = ?`

	// Compaction first finds the rows to remove, then deletes them by
	// primary key: MySQL refuses a DELETE whose subquery reads the table
	// it deletes from, and the revision lock keeps the log still between
	// the two. The revision range walks the primary key; the newer-row
	// probes are one seek each in kite_log_key. Placeholders: from, to,
	// compacted, compacted. A row goes when it is a tombstone at or below
	// compacted, or a newer row of its key exists at or below compacted
	// (a later revision, or a later sub-revision of the same one).
	sqlCompactFind = `SELECT l.rev, l.sub FROM kite_log AS l
		WHERE l.rev >= ? AND l.rev <= ? AND l.rev <= ?
		AND (l.deleted
			OR EXISTS (SELECT 1 FROM kite_log AS n WHERE n.k = l.k AND n.rev > l.rev AND n.rev <= ?)
			OR EXISTS (SELECT 1 FROM kite_log AS n WHERE n.k = l.k AND n.rev = l.rev AND n.sub > l.sub))
		ORDER BY l.rev, l.sub`
	sqlCompactDelete = `DELETE FROM kite_log WHERE (rev, sub) IN `
)

// changesSQL reads the log in (rev, sub) order between two revisions;
// withPrev adds each change's previous row, found by one backward seek in
// kite_log_key from the change itself (the seek's first row is the change,
// which the filter skips) and joined by primary key. A previous tombstone
// fails the join condition, so it counts as no previous row, as a key that
// did not exist has no prev_kv in etcd. Placeholders: from, to[, limit].
func changesSQL(withPrev, limited bool) string {
	var b strings.Builder
	b.WriteString(`SELECT c.rev, c.sub, c.k, c.create_rev, c.version, c.lease, c.deleted, c.value`)
	if withPrev {
		b.WriteString(`, COALESCE(p.rev, 0), COALESCE(p.create_rev, 0), COALESCE(p.version, 0),
			COALESCE(p.lease, 0), p.value`)
	}
	b.WriteString(` FROM kite_log AS c`)
	if withPrev {
		prev := func(col string) string {
			return `(SELECT h.` + col + ` FROM kite_log AS h WHERE h.k = c.k AND h.rev <= c.rev
				AND (h.rev < c.rev OR h.sub < c.sub) ORDER BY h.rev DESC, h.sub DESC LIMIT 1)`
		}
		b.WriteString(` LEFT JOIN kite_log AS p ON p.rev = ` + prev("rev") + ` AND p.sub = ` + prev("sub") +
			` AND NOT p.deleted`)
	}
	b.WriteString(` WHERE c.rev >= ? AND c.rev <= ? ORDER BY c.rev, c.sub`)
	if limited {
		b.WriteString(` LIMIT ?`)
	}
	return b.String()
}

// queries holds the Range, Count and Changes variants, built once per
// Backend.
type queries struct {
	ranges  [16]string // by rangeIndex
	counts  [4]string  // by countIndex
	changes [4]string  // by changesIndex
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// rangeIndex picks the Range variant: latest reads come from kite_live,
// historical ones from the log; an open range ("\x00" end) has no upper
// bound in its SQL rather than a sentinel, so the index range stays tight;
// keys-only variants never read values; a limit of 0 has no LIMIT.
func rangeIndex(historical, open, keysOnly, limited bool) int {
	return 8*b2i(historical) + 4*b2i(open) + 2*b2i(keysOnly) + b2i(limited)
}

func countIndex(historical, open bool) int { return 2*b2i(historical) + b2i(open) }

func changesIndex(withPrev, limited bool) int { return 2*b2i(withPrev) + b2i(limited) }

func newQueries() *queries {
	q := &queries{}
	for _, hist := range []bool{false, true} {
		for _, open := range []bool{false, true} {
			for _, keysOnly := range []bool{false, true} {
				for _, limited := range []bool{false, true} {
					q.ranges[rangeIndex(hist, open, keysOnly, limited)] = rangeSQL(hist, open, keysOnly, limited, false)
				}
			}
			q.counts[countIndex(hist, open)] = rangeSQL(hist, open, true, false, true)
		}
	}
	for _, withPrev := range []bool{false, true} {
		for _, limited := range []bool{false, true} {
			q.changes[changesIndex(withPrev, limited)] = changesSQL(withPrev, limited)
		}
	}
	return q
}

// rangeSQL builds one Range or Count variant. Placeholders, in order: the
// start key, the end key (bounded variants), the revision twice
// (historical) and the limit (limited).
//
// Latest reads walk kite_live's primary key in key order and stop at the
// limit. Historical reads walk kite_log_key over the range, which yields
// (k, rev, sub) order, keep each key's newest row at or below the
// revision (no newer one exists at or below it: one seek per row), and
// drop tombstones. The walk is in key order already, so ORDER BY costs no
// sort and the limit stops it early. It reads every row of the range's
// keys at or below the revision, which compaction bounds.
func rangeSQL(historical, open, keysOnly, limited, count bool) string {
	cols := "k, create_rev, mod_rev, version, lease"
	if !keysOnly {
		cols += ", value"
	}
	var b strings.Builder
	if !historical {
		if count {
			cols = "COUNT(*)"
		}
		b.WriteString("SELECT " + cols + " FROM kite_live WHERE k >= ?")
		if !open {
			b.WriteString(" AND k < ?")
		}
		if !count {
			b.WriteString(" ORDER BY k")
		}
	} else {
		cols = "l." + strings.ReplaceAll(strings.Replace(cols, "mod_rev", "rev", 1), ", ", ", l.")
		if count {
			cols = "COUNT(*)"
		}
		// FORCE INDEX: for a wide range and a small LIMIT the planner may
		// otherwise walk the primary key and sort.
		b.WriteString("SELECT " + cols + " FROM kite_log AS l FORCE INDEX (kite_log_key) WHERE l.k >= ?")
		if !open {
			b.WriteString(" AND l.k < ?")
		}
		b.WriteString(` AND l.rev <= ? AND NOT l.deleted
			AND NOT EXISTS (SELECT 1 FROM kite_log AS n WHERE n.k = l.k AND n.rev > l.rev AND n.rev <= ?)
			AND NOT EXISTS (SELECT 1 FROM kite_log AS n WHERE n.k = l.k AND n.rev = l.rev AND n.sub > l.sub)`)
		if !count {
			b.WriteString(" ORDER BY l.k")
		}
	}
	if limited && !count {
		b.WriteString(" LIMIT ?")
	}
	return b.String()
}
