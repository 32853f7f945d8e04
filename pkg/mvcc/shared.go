package mvcc

import "context"

// Shared is implemented by a Backend that several Stores, in several kite
// processes, write at once (pkg/drivers/postgres). The Store of each process
// follows one ordered feed of committed revisions: its own commits, and the
// commits of the others, which it learns of through Notices and then reads
// from the log. Everything a Store keeps in memory (current and compacted
// revisions, the watch hub, alarms, lease timers) is derived from that feed.
//
// A driver that implements Shared must also serialise write transactions
// across processes (BeginWrite locks the revision counter), so that commit
// order is revision order and a Store that reads the log after the last
// revision it has seen can never skip a row that commits late.
type Shared interface {
	// Notices delivers what the other Stores on the storage did, in the
	// order the storage committed it. The driver never delivers a Store's
	// own commits back to it. The channel is closed by Close.
	Notices() <-chan Notice

	// RenewLease records in the storage that lease id was kept alive
	// (ErrLeaseNotFound if the storage holds no such lease: it was revoked
	// through another Store) and tells every other Store, so that
	// whichever runs lease expiry restarts its clock. The record is what
	// decides (LeaseExpiryTx); the telling is best effort: a Store that may
	// have missed renewals is sent a Notice with Resync set and gives
	// every lease its full TTL.
	RenewLease(ctx context.Context, id int64) error

	// Primary reports changes of this Store's role: true when it becomes
	// the one Store that runs the jobs that must run once (lease expiry,
	// automatic and physical compaction), false when it loses that role
	// (its lock connection died). The channel is closed by Close; a
	// Store starts as not primary.
	Primary() <-chan bool
}

// LeaseExpiryTx is implemented by the WriteTx of a Shared backend. The
// Store that runs lease expiry decides by its own clock when a lease is
// due, but its clock hears of renewals made through the other Stores only
// by their notices, and while the primary lock changes hands two Stores
// may both run expiry. Asking the storage, inside the transaction that
// would revoke the lease, makes the decision safe whatever a Store has
// heard: a lease renewed where the storage saw it is never revoked early.
type LeaseExpiryTx interface {
	// LeaseExpired reports whether lease id (which exists) has gone its
	// whole TTL since it was granted or last renewed, by the storage's
	// clock, and keeps any renewal from committing until the transaction
	// ends: a renewal after the answer finds the lease revoked.
	LeaseExpired(ctx context.Context, id int64) (bool, error)
}

// Notice is one message of a Shared backend's feed.
type Notice struct {
	// Rev is the current revision after another Store's commit (0 for a
	// notice that is not about a commit).
	Rev int64
	// Changed says which state besides the log the commit changed; those
	// are re-read from the storage.
	Changed Changed
	// Renewed is a lease another Store kept alive (0 if none).
	Renewed int64
	// Resync says notices may have been lost (the driver's notification
	// connection was re-established): the Store re-reads everything it
	// keeps in memory.
	Resync bool
}

// Changed is a set of state kinds a commit changed.
type Changed uint8

const (
	// ChangedLeases: the lease table (a grant or a revoke).
	ChangedLeases Changed = 1 << iota
	// ChangedAlarms: the alarm table.
	ChangedAlarms
	// ChangedCompacted: the compacted revision.
	ChangedCompacted
	// ChangedAuth: the authentication state (users, roles, enabled).
	ChangedAuth
)
