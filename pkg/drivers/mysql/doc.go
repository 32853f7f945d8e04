// Package mysql stores kite's revision log in a MySQL or MariaDB
// database, in InnoDB tables. Its SQL is written for MySQL 8.0 and later
// and MariaDB 10.6 and later; its tests have run on MariaDB 10.11 only.
// Several kite servers may share one database, as in Postgres mode; see
// "Several servers", "History" and "Not yet" below.
//
// # One writer at a time, in revision order
//
// Every write transaction (READ COMMITTED) begins by locking the single
// row that holds the current and compacted revisions (SELECT ... FOR
// UPDATE). Whoever holds the lock writes revision current+1 and commits,
// and only then can the next writer read the counter: commit order is
// revision order and revisions are dense, with no AUTO_INCREMENT that
// could hand out numbers that commit out of order or leave gaps after a
// rollback. A reader of the log after the last revision it saw can
// therefore never skip a row that commits late, which a server woken by
// another's commit relies on. Serialising writers costs little, since kite batches
// many requests into one transaction. READ COMMITTED, not InnoDB's default
// REPEATABLE READ, because every read after the lock must see what the
// previous writer committed; a REPEATABLE READ snapshot could predate the
// lock, and with innodb_snapshot_isolation on, a write to a row changed
// since would fail. The writes of a transaction are kept in memory and
// sent, as multi-row statements, with the next read or with the COMMIT:
// a batch of puts costs one round trip to begin, one per read the applier
// needs, and one to commit. COMMIT returns once InnoDB has flushed its
// redo log (innodb_flush_log_at_trx_commit=1, the server's default; kite
// warns at Open if the server says otherwise and changes no server
// setting).
//
// # Snapshot reads
//
// A read transaction is START TRANSACTION WITH CONSISTENT SNAPSHOT, READ
// ONLY at REPEATABLE READ: its snapshot is taken when it starts, before
// it reads the revisions, and every read of it sees that one committed
// state. It takes no locks, so the writer never waits for it nor it for
// the writer, and snapshot isolation has nothing to refuse. The isolation
// level of every transaction is named when it starts (SET TRANSACTION
// applies to the next transaction only), so neither the server's default
// nor a session default set through the DSN decides it. GetLatest, the
// commonest read, is one statement under autocommit, which InnoDB runs
// as a consistent read of its own: the row and the revisions agree.
//
// # Binary keys
//
// Keys are VARBINARY and values LONGBLOB: they compare bytewise, as etcd
// orders keys, under no collation or character set, and the connection
// itself uses utf8mb4 with its binary collation. Keys are indexed whole,
// which InnoDB allows up to 3072 bytes an index entry; kite stores keys
// of up to 3000 bytes (schema.go says why not a BLOB prefix) and refuses
// longer ones with mvcc.ErrRequestTooLarge. The log is clustered by
// (revision, sub-revision), with a (key, revision, sub-revision) index
// for history, previous rows and compaction; a live table holds each
// key's newest row, value included, so latest reads never touch the log.
// The schema is created and migrated at Open under a named lock (GET_LOCK
// on one connection, its name derived from the database's), and a
// database written by a newer kite is refused.
//
// # Reads of the past
//
// MySQL has no LATERAL join in MariaDB, and neither server bounds a
// correlated subquery's walk of an index by a value of the outer row, so
// "the newest row of this key at or below that revision", asked once per
// row, walks the key's whole history each time: a read of one key with
// thousands of versions took seconds. A historical range therefore reads
// pages of keys, each page one walk of the key index in key order with
// the newest revision of each key (history.go), and the previous rows of
// changes are looked up with constants, one index dive each, or taken
// from the changes read already. Their cost follows the rows they
// return, and TestHotKeyHistory keeps it so.
//
// # Connections
//
// A DSN is kine's and k3s's mysql://user:pass@tcp(host:3306)/db?params
// or a URL mysql://user:pass@host:3306/db?params (dsn.go). The driver
// interpolates arguments into the statement text (binary ones as escaped
// _binary literals), so every statement is one round trip and nothing is
// prepared, and several statements go in one query where kite needs them
// together. Every connection gets a strict sql_mode and autocommit on.
//
// # Snapshots
//
// Snapshot copies one read transaction into a temporary SQLite file
// (pkg/drivers/sqlite, via mvcc.Copy), as the Postgres driver does:
// `kite snapshot restore` restores it into SQLite mode.
//
// # Several servers
//
// Every server on a database is a writer (the revision row lock orders
// them) and serves watches of every server's writes. After its COMMIT a
// server sends the new revision over a TCP connection it holds with each
// other live server, whose addresses are registered in kite_server; the
// woken server reads the log after its last revision (wake.go says why
// not the binlog, and what covers a lost wake-up: heartbeats, a resync
// after a reconnect, a one-second poll of the current revision only while
// a live peer is unreachable, counted in kite_db_wake_polls_total). The
// once-only jobs (lease expiry, compaction) run on the primary, the holder
// of a lease row, kite_primary, renewed every second (primary.go says why
// not GET_LOCK). Lease renewals are recorded in kite_lease.renewed, so the
// primary's revoking transaction re-checks that the lease really expired
// (mvcc.LeaseExpiryTx), whichever server the keep-alive reached.
//
// # Size
//
// Size reads the allocated size of kite's table files from InnoDB's
// tablespace view, so a quota is judged on what was just written, as
// etcd's is on its file; InnoDB's table statistics, which lag writes by
// seconds to minutes, give the part in use, and the whole where the view
// is not readable (it needs the PROCESS privilege).
//
// # Galera
//
// On a node of a Galera cluster (wsrep_on) every connection waits for
// causality before reads (wsrep_sync_wait=1), a write transaction that
// loses certification to another node's is reported as mvcc.ErrConflict
// and applied again by the Store, and write transactions are guarded so
// that nothing of one rolled back under kite commits (galera.go).
//
// # History: a revision number is never handed out twice
//
// After a failover to an asynchronous replica that lacked acknowledged
// commits, every write batch's record of the server it went to
// (server_id, and whether that was a Galera node) no longer matches the
// server serving the database; every read and write compares them in the
// statement that reads the revisions, and the Backend refuses the database
// with mvcc.ErrHistoryLost until `kite datastore accept-history`
// (AcceptHistory). failover.go says what it cannot see.
//
// # Not yet
//
// On Galera the schema migration's GET_LOCK holds per node (its steps
// are idempotent, and a migration that loses certification runs again).
package mysql
