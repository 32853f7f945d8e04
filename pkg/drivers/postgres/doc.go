// Package postgres stores kite's revision log in a Postgres database that
// several kite servers share: each server runs its own mvcc.Store on the
// same tables, and the driver makes them behave as one etcd.
//
// # One writer at a time, in revision order
//
// Every write transaction (READ COMMITTED) begins by locking the single
// row that holds the current and compacted revisions. Whichever server
// holds the lock writes revision current+1 and commits, and only then can
// the next writer, on any server, read the counter. So commit order is
// revision order and revisions are dense: a server that reads the log
// after the last revision it has seen can never skip a row that commits
// late, which is what mvcc.Shared asks for. Serialising writers costs
// little, since kite batches many requests into one transaction; a
// scheme that let writers run in parallel would need sequence numbers
// that could commit out of order and leave gaps. Under READ COMMITTED
// every statement after the lock sees what the previous writers committed,
// and the writes of a transaction are queued in memory and sent with the
// next read or the COMMIT, so a batch of puts costs one round trip per
// read, not per statement.
//
// # NOTIFY is a wake-up, not data
//
// A commit that changed anything sends pg_notify in the same transaction:
// Postgres delivers it only if, and when, the transaction commits, in
// commit order. The payload carries the sender's origin id, the new
// revision and which of leases, alarms, the compacted revision and the
// authentication state changed (well under 100 bytes); the receivers read the rows themselves from the
// log. Notifications are therefore never the only copy of anything: one
// lost (the listening connection dropped) costs a Resync notice, after
// which the Store re-reads what it keeps in memory.
//
// # Dedicated connections
//
// LISTEN holds its own connection outside the pool (a session hears only
// what it listens for, and only while it reads), blocked in
// WaitForNotification: nothing polls while it is healthy. It is listening
// before Open returns. The primary lock also has its own connection: a
// session-level advisory lock lives exactly as long as its session, so the
// server whose process or network dies loses the role without any lease
// or heartbeat table, and another server's once-a-second attempt takes it
// over. Both connections ask the server for short TCP keepalives so a
// vanished peer is noticed in seconds. Connections are named in
// pg_stat_activity by application_name "kite:<role>:<origin>" (role pool,
// listen or primary; "kite" is the DSN's application_name when it sets
// one).
//
// # Schema
//
// Keys and values are bytea, which orders bytewise as etcd does. The log
// is keyed by (revision, sub-revision), with a (key, revision,
// sub-revision) index for historical reads and compaction; a live table
// holds each key's newest row, value included, so latest reads never
// touch the log. Historical ranges skip from key to key through the index
// with a recursive CTE, one seek per key, so they cost what they return
// and not the key's history. See schema.go and queries.go. The schema is
// created and migrated at Open in one transaction under an advisory
// lock, so servers starting together on an empty database do not race,
// and a database written by a newer kite is refused. Advisory locks and
// notification channels are per database, so one database holds one kite
// cluster and the names are constants.
//
// # History: a revision number is never handed out twice
//
// A failover to a standby, or a point-in-time restore, can give kite a
// database whose history ends before revisions kite already acknowledged
// and sent to watchers. Serving it would number new writes with those
// revisions again, with other data: the one thing etcd's contract rules
// out. Such a database always starts a new Postgres timeline (a promotion
// or a restore does; a standby has its primary's system identifier, so
// that cannot tell them apart), so every write batch records in the
// revision row, in the UPDATE that moves the revisions (no round trip of
// its own; a batch that moves none still sends it), the timeline it was
// written to and whether its primary acknowledged only commits a
// synchronous standby had flushed (synchronous_standby_names set and the
// session's synchronous_commit on, remote_write or remote_apply). Every
// new pool connection (pgx's AfterConnect: after a failover every
// connection is new, the LISTEN reconnect's Resync reads through them)
// and every write, under the revision lock, compares the database's
// current timeline with the recorded one (history.go). Another timeline
// after asynchronous writes may have lost acknowledged revisions: the
// Backend refuses everything with mvcc.ErrHistoryLost from then on, and
// logs it once with both timelines and the last recorded revision. After
// synchronous writes nothing acknowledged can be missing: the new
// timeline is recorded by the next write and serving goes on. A timeline
// of 0 (a database from before schema version 3) is simply recorded.
//
// The record is that of the last write the new primary has, so it cannot
// speak for writes it never received: a primary switched from synchronous
// to asynchronous replication shortly before it failed, or a
// point-in-time restore of a synchronously replicated database, passes
// the check. The Store closes that hole for every server that is running:
// one whose published revision is above the database's refuses, whatever
// the database says (pkg/mvcc/history.go). A server started afterwards has
// no memory to compare, which is why the timeline is recorded at all.
// Even so, in those two cases a server that had published less than the
// database lost may write before a server that published more notices:
// only replication that stays synchronous, and a restore that reaches the
// end of the WAL, rule a reused revision out.
// The check errs towards refusing: a clean switchover to an asynchronous
// standby that had everything is refused too, and the operator accepts it
// with `kite datastore accept-history` (AcceptHistory), then restarts
// every server. docs/failover.md is the operator's side.
//
// # Snapshots
//
// Snapshot copies one REPEATABLE READ snapshot into a temporary SQLite
// file (pkg/drivers/sqlite, via mvcc.Copy): `kite snapshot restore`
// restores it into SQLite mode.
package postgres
