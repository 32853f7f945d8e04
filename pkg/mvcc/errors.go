package mvcc

import "errors"

// Sentinel errors of the store. pkg/server maps each of them to the gRPC
// status etcd returns (go.etcd.io/etcd/api/v3/v3rpc/rpctypes) in one place.
// Malformed requests (empty keys, duplicate keys in a txn, too many ops) never
// reach the store: pkg/server rejects them first, as etcd's v3rpc layer does.
var (
	// ErrCompacted: the requested revision is below the compacted revision
	// and its history is gone.
	ErrCompacted = errors.New("mvcc: required revision has been compacted")
	// ErrFutureRev: the requested revision is newer than the current one.
	ErrFutureRev = errors.New("mvcc: required revision is a future revision")
	// ErrLeaseNotFound: a put or revoke named a lease that does not exist.
	ErrLeaseNotFound = errors.New("lease: lease not found")
	// ErrLeaseExists: a grant asked for an ID that is already in use.
	ErrLeaseExists = errors.New("lease: lease already exists")
	// ErrLeaseTTLTooLarge: a grant asked for a TTL above etcd's maximum.
	ErrLeaseTTLTooLarge = errors.New("lease: too large lease TTL")
	// ErrKeyNotFound: a put with ignore_value or ignore_lease named a key
	// that does not exist.
	ErrKeyNotFound = errors.New("mvcc: key not found")
	// ErrNoSpace: the backend quota is exhausted and the NOSPACE alarm is
	// raised; writes are refused until space is freed and the alarm disarmed.
	ErrNoSpace = errors.New("mvcc: database space exceeded")
	// ErrCorrupt: the CORRUPT alarm is raised (members' key spaces
	// differ); writes are refused until it is disarmed.
	ErrCorrupt = errors.New("mvcc: corrupt cluster")
	// ErrUnavailable: the storage cannot be reached (a database server
	// restarting or failing over). Drivers wrap such errors with it; the
	// request may be retried. A write that fails with it may or may not
	// have been committed, as with etcd's request timeout.
	ErrUnavailable = errors.New("mvcc: storage unavailable")
	// ErrConflict: the storage aborted a write transaction in favour of a
	// concurrent one (a Galera certification conflict between writers on
	// two nodes, a deadlock). Nothing of it was committed, so the Store
	// applies the batch again (commit.go); a client sees it only when
	// every attempt lost, as codes.Unavailable.
	ErrConflict = errors.New("mvcc: write transaction lost to a concurrent one")
	// ErrClosed: the store is closed.
	ErrClosed = errors.New("mvcc: store closed")
	// ErrTooManyChanges: one request would change more keys in one
	// revision than the driver's schema can number (a DeleteRange or a
	// lease revoke of very many keys). Drivers wrap it; every replica hits
	// the limit alike, so a replicated log may answer the request with it
	// instead of stopping (the only storage error that is an answer).
	ErrTooManyChanges = errors.New("mvcc: too many changes in one revision")
	// ErrDiskFull: the storage refused a write because its disk is full
	// (ENOSPC, SQLite's SQLITE_FULL, Postgres' disk_full). Drivers wrap the
	// database's error with it, so the store can tell an operator the cause.
	ErrDiskFull = errors.New("mvcc: disk full")
	// ErrRequestTooLarge: a write request is larger than the largest one
	// the server (or the replicated log) accepts.
	ErrRequestTooLarge = errors.New("mvcc: request is too large")

	// The errors of a Replicator (raftsql): why a proposal, a linearizable
	// read or a request forwarded to the leader got no answer.

	// ErrStopped: the replica is stopping or has stopped.
	ErrStopped = errors.New("mvcc: replica stopped")
	// ErrNoLeader: the replicated log has no leader to commit through.
	ErrNoLeader = errors.New("mvcc: no leader")
	// ErrTimeout: the request was not committed (or the read not
	// confirmed) in time; it may still be committed later.
	ErrTimeout = errors.New("mvcc: request timed out")
	// ErrHistoryLost: the storage's history is behind what this server
	// served (a database restored, or failed over to a standby that had
	// not received every acknowledged commit). Serving it would hand out
	// revision numbers a second time for different data, so the Store
	// refuses every request until the process restarts; the operator
	// restores the database or accepts the loss (docs/failover.md).
	ErrHistoryLost = errors.New("mvcc: storage history is behind what was served")
)

// errLeaseRenewed refuses an expiry revoke of a lease that the storage's
// clock says was renewed within its TTL (LeaseExpiryTx). It never reaches
// a client: only the expiry loop asks for such revokes.
var errLeaseRenewed = errors.New("mvcc: lease renewed within its TTL")
