package postgres

import (
	"fmt"
	"strings"
)

// Every statement is a constant string, or one of a few variants built once
// per Backend, so pgx's statement cache prepares each once per connection
// and every later call only binds and executes it.

// notifyChannel is the LISTEN/NOTIFY channel. Channels are per database, as
// is a kite cluster.
const notifyChannel = "kite"

const (
	sqlRevisions = `SELECT current_rev, compacted_rev FROM kite_revision`
	// The lock also reads what the last write recorded of its timeline,
	// and the timeline of now (history.go); every write records its own.
	sqlLockRevisions = `SELECT current_rev, compacted_rev, timeline, synced, ` + sqlTimeline +
		` FROM kite_revision FOR UPDATE`
	sqlSetRevisions = `UPDATE kite_revision SET current_rev = $1, compacted_rev = $2, timeline = ` +
		sqlTimeline + `, synced = ` + sqlSynced

	sqlBeginRead  = `BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY`
	sqlBeginWrite = `BEGIN ISOLATION LEVEL READ COMMITTED`
	// SET LOCAL: it ends with the transaction.
	sqlWriteIdleTimeout = `SET LOCAL idle_in_transaction_session_timeout = '30s'`

	sqlGet = `SELECT key, create_rev, mod_rev, version, lease, value
		FROM kite_live WHERE key = $1`
	// One statement is one snapshot: the revisions always come back, the
	// row's columns are NULL (0) for a missing key.
	sqlGetLatest = `SELECT r.current_rev, r.compacted_rev, l.key, COALESCE(l.create_rev, 0),
		COALESCE(l.mod_rev, 0), COALESCE(l.version, 0), COALESCE(l.lease, 0), l.value
		FROM kite_revision AS r LEFT JOIN kite_live AS l ON l.key = $1`

	sqlLeases = `SELECT id, ttl FROM kite_lease ORDER BY id`
	sqlLease  = `SELECT ttl FROM kite_lease WHERE id = $1`
	sqlAlarms = `SELECT member, type FROM kite_alarm ORDER BY member, type`
	// "lease <> 0" lets the planner use the partial index kite_live_lease
	// for any parameter value.
	sqlLeaseKeys = `SELECT key FROM kite_live WHERE lease = $1 AND lease <> 0 ORDER BY key`
	// The keys without a lease are every key not in kite_live_lease: a walk
	// of kite_live. The server never asks for them (lease 0 is no lease).
	sqlUnleasedKeys = `SELECT key FROM kite_live WHERE lease = 0 ORDER BY key`

	// A write transaction's rows are sent as arrays, one statement per
	// table, however many rows the transaction wrote.
	sqlInsertLog = `INSERT INTO kite_log (rev, sub, key, create_rev, version, lease, deleted, value)
		SELECT * FROM unnest($1::int8[], $2::int4[], $3::bytea[], $4::int8[], $5::int8[],
			$6::int8[], $7::bool[], $8::bytea[])`
	sqlUpsertLive = `INSERT INTO kite_live (key, mod_rev, create_rev, version, lease, value)
		SELECT * FROM unnest($1::bytea[], $2::int8[], $3::int8[], $4::int8[], $5::int8[], $6::bytea[])
		ON CONFLICT (key) DO UPDATE SET mod_rev = excluded.mod_rev,
			create_rev = excluded.create_rev, version = excluded.version,
			lease = excluded.lease, value = excluded.value`
	sqlDeleteLive = `DELETE FROM kite_live WHERE key = ANY($1::bytea[])`

	sqlAuthState    = `SELECT state FROM kite_auth`
	sqlPutAuthState = `INSERT INTO kite_auth (state) VALUES ($1)
		ON CONFLICT (one) DO UPDATE SET state = excluded.state`

	// renewed takes its default, the time of the insert: a grant starts
	// the lease's clock.
	sqlPutLease = `INSERT INTO kite_lease (id, ttl) VALUES ($1, $2)
		ON CONFLICT (id) DO UPDATE SET ttl = excluded.ttl, renewed = clock_timestamp()`
	// sqlRenewLease records a renewal and announces it in one round trip;
	// no row means the lease is gone. It runs outside any transaction, so
	// the notification orders with nothing (a lost one is covered by the
	// Resync that follows a lost listener connection) and the row is
	// locked only for the statement: a revoking transaction that has
	// checked the lease (sqlLeaseExpired) makes it wait, then find no row.
	sqlRenewLease = `WITH r AS (UPDATE kite_lease SET renewed = clock_timestamp() WHERE id = $1 RETURNING id)
		SELECT pg_notify($2, $3) FROM r`
	// sqlLeaseExpired locks the lease row for the rest of the write
	// transaction; under READ COMMITTED it reads the newest committed
	// renewal, waiting for one in flight.
	sqlLeaseExpired = `SELECT clock_timestamp() >= renewed + ttl * interval '1 second'
		FROM kite_lease WHERE id = $1 FOR UPDATE`
	sqlDeleteLease = `DELETE FROM kite_lease WHERE id = $1`
	sqlPutAlarm    = `INSERT INTO kite_alarm (member, type) VALUES ($1, $2)
		ON CONFLICT (member, type) DO NOTHING`
	sqlDeleteAlarm = `DELETE FROM kite_alarm WHERE member = $1 AND type = $2`

	// The revision range walks the primary key; the newer-row probe is one
	// seek in kite_log_key. $3 is the compacted revision: a row is removed
	// when it is a tombstone at or below it, or when a newer row of its key
	// exists at or below it. The probe is correlated by an inequality, so
	// Postgres cannot turn it into a hashed subplan over the whole log.
	sqlCompact = `DELETE FROM kite_log AS l
		WHERE l.rev >= $1 AND l.rev <= $2 AND l.rev <= $3
		AND (l.deleted OR EXISTS (SELECT 1 FROM kite_log AS n
			WHERE n.key = l.key AND (n.rev, n.sub) > (l.rev, l.sub) AND n.rev <= $3))`

	sqlNotify = `SELECT pg_notify($1, $2)`
)

// sqlChanges reads the log in (rev, sub) order between two revisions.
const sqlChanges = `SELECT c.rev, c.sub, c.key, c.create_rev, c.version, c.lease, c.deleted, c.value
	FROM kite_log AS c WHERE c.rev >= $1 AND c.rev <= $2 ORDER BY c.rev, c.sub LIMIT $3`

// sqlChangesPrev adds each change's previous row: one backward seek in
// kite_log_key. A previous tombstone fails the join condition, so it
// counts as no previous row, as a key that did not exist has no prev_kv in
// etcd.
const sqlChangesPrev = `SELECT c.rev, c.sub, c.key, c.create_rev, c.version, c.lease, c.deleted, c.value,
	COALESCE(p.rev, 0), COALESCE(p.create_rev, 0), COALESCE(p.version, 0), COALESCE(p.lease, 0), p.value
	FROM kite_log AS c
	LEFT JOIN LATERAL (SELECT h.rev, h.create_rev, h.version, h.lease, h.deleted, h.value
		FROM kite_log AS h
		WHERE h.key = c.key AND (h.rev, h.sub) < (c.rev, c.sub)
		ORDER BY h.rev DESC, h.sub DESC LIMIT 1) AS p ON NOT p.deleted
	WHERE c.rev >= $1 AND c.rev <= $2 ORDER BY c.rev, c.sub LIMIT $3`

// queries holds the Range and Count variants, built once per Backend.
type queries struct {
	ranges [8]string // by rangeIndex
	counts [4]string // by countIndex
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
// keys-only variants never read (or detoast) values.
func rangeIndex(historical, open, keysOnly bool) int {
	return 4*b2i(historical) + 2*b2i(open) + b2i(keysOnly)
}

func countIndex(historical, open bool) int { return 2*b2i(historical) + b2i(open) }

func newQueries() *queries {
	q := &queries{}
	for _, hist := range []bool{false, true} {
		for _, open := range []bool{false, true} {
			for _, keysOnly := range []bool{false, true} {
				q.ranges[rangeIndex(hist, open, keysOnly)] = rangeSQL(hist, open, keysOnly, false)
			}
			q.counts[countIndex(hist, open)] = rangeSQL(hist, open, true, true)
		}
	}
	return q
}

// rangeSQL builds one Range or Count variant. Placeholders, in order: $1
// the start key, then the end key (bounded variants), the revision
// (historical) and the limit (Range; NULL is no limit).
//
// Latest reads scan kite_live in key order and stop at the limit.
// Historical reads skip from key to key through kite_log_key with a
// recursive CTE (one seek per distinct key, never a walk over a key's
// history), take the newest row at or below the revision with one backward
// seek, and drop tombstones. The CTE yields keys in ascending order and the
// nested loop keeps that order, so there is no ORDER BY: a sort would have
// to read the whole range before returning the first row.
func rangeSQL(historical, open, keysOnly, count bool) string {
	params := 0
	param := func() string {
		params++
		return fmt.Sprintf("$%d", params)
	}
	from := param()
	bound := func(string) string { return "" }
	if !open {
		to := param()
		bound = func(col string) string { return " AND " + col + " < " + to }
	}
	cols := "key, create_rev, mod_rev, version, lease"
	if !keysOnly {
		cols += ", value"
	}
	var b strings.Builder
	if !historical {
		if count {
			cols = "count(*)"
		}
		b.WriteString("SELECT " + cols + " FROM kite_live WHERE key >= " + from + bound("key"))
		if !count {
			b.WriteString(" ORDER BY key LIMIT " + param())
		}
		return b.String()
	}
	b.WriteString("WITH RECURSIVE k(key) AS (")
	b.WriteString("(SELECT key FROM kite_log WHERE key >= " + from + bound("key") + " ORDER BY key LIMIT 1)")
	b.WriteString(" UNION ALL SELECT (SELECT n.key FROM kite_log AS n WHERE n.key > k.key" + bound("n.key"))
	b.WriteString(" ORDER BY n.key LIMIT 1) FROM k WHERE k.key IS NOT NULL) ")
	if count {
		b.WriteString("SELECT count(*)")
	} else {
		b.WriteString("SELECT h." + strings.ReplaceAll(cols, ", ", ", h."))
	}
	inner := "l.key, l.create_rev, l.rev AS mod_rev, l.version, l.lease, l.deleted"
	if !keysOnly {
		inner += ", l.value"
	}
	b.WriteString(" FROM k CROSS JOIN LATERAL (SELECT " + inner +
		" FROM kite_log AS l WHERE l.key = k.key AND l.rev <= " + param() +
		" ORDER BY l.rev DESC, l.sub DESC LIMIT 1) AS h WHERE NOT h.deleted")
	if !count {
		b.WriteString(" LIMIT " + param())
	}
	return b.String()
}
