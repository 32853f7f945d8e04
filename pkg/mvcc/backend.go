package mvcc

import (
	"context"
	"io"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Backend is durable storage for the revision log. It is declared here, by its
// consumer, and implemented by every driver (pkg/drivers/sqlite, postgres,
// raftsql). A driver stores rows and decides where they live; it never decides
// what a write means: revisions, versions, compares and lease rules are all
// computed by this package and handed to the driver as finished rows.
//
// The log holds one row per key change. A row is identified by its main
// revision and sub-revision (the position of the change inside its
// transaction). A key has at most one row per revision, with one exception
// that etcd allows: a txn may delete a key through a from-key range and put
// it again, leaving a tombstone and then a put of the key in one revision.
// "Newest" therefore always means the highest (revision, sub-revision).
//
// Besides the log a driver keeps an index of live keys (the newest row of each
// key that is not a tombstone), the current and compacted revisions, and the
// lease table. All of it changes only inside a WriteTx.
type Backend interface {
	// BeginRead opens a read-only snapshot. Readers are never blocked by the
	// writer and see only committed transactions.
	BeginRead(ctx context.Context) (ReadTx, error)

	// GetLatest returns the live row of key (nil if the key does not exist)
	// together with the current and compacted revisions, all read from one
	// consistent committed state, as a ReadTx would give them. It is the
	// fast path of the commonest request, a latest single-key Range: a
	// driver can answer it with one statement instead of a transaction.
	GetLatest(ctx context.Context, key []byte) (kv *mvccpb.KeyValue, current, compacted int64, err error)

	// BeginWrite opens the write transaction. The Store guarantees that at
	// most one WriteTx of a Backend is open at a time in this process; a
	// driver shared by several processes (postgres) serialises them itself.
	BeginWrite(ctx context.Context) (WriteTx, error)

	// Size returns the bytes the database occupies on disk and the bytes in
	// use by live pages (etcd's db_size and db_size_in_use).
	Size(ctx context.Context) (size, inUse int64, err error)

	// Defragment returns free pages to the file system. It may block writers
	// while it runs, as etcd's defrag does.
	Defragment(ctx context.Context) error

	// Snapshot takes a consistent copy of the whole database, in a form the
	// same driver can open again as its data file, and returns a reader of it
	// with its size in bytes (etcd's snapshot stream announces the bytes
	// remaining in every message). Closing the reader releases the copy.
	Snapshot(ctx context.Context) (io.ReadCloser, int64, error)

	// Close releases the database. Open transactions must be finished first.
	Close() error
}

// ReadTx is a consistent snapshot of the store. Every method sees the same
// committed state. A ReadTx must be ended with Rollback (a WriteTx with Commit
// or Rollback).
type ReadTx interface {
	// Revisions returns the current revision (the main revision of the newest
	// committed write; 0 for an empty store) and the compacted revision (0 if
	// never compacted).
	Revisions(ctx context.Context) (current, compacted int64, err error)

	// Range returns the keys in [key, end) as they were at revision rev, in
	// ascending key order, skipping keys that did not exist or were deleted at
	// rev. end follows etcd: nil means only key itself; "\x00" means every key
	// >= key. At most limit rows are returned when limit > 0. With keysOnly the
	// Value field is left empty. rev is never 0: the caller passes the current
	// revision for a latest read, and a driver should serve rev == current from
	// its live-key index instead of the log.
	Range(ctx context.Context, key, end []byte, rev, limit int64, keysOnly bool) ([]*mvccpb.KeyValue, error)

	// Count returns how many keys Range(key, end, rev) would return without a
	// limit, without reading values.
	Count(ctx context.Context, key, end []byte, rev int64) (int64, error)

	// Get returns the live row of key at the current revision, or nil if the
	// key does not exist. It is the fast path for compares and prev_kv.
	Get(ctx context.Context, key []byte) (*mvccpb.KeyValue, error)

	// Changes returns the log rows with fromRev <= main revision <= toRev in
	// (revision, sub-revision) order, at most limit rows when limit > 0 (a
	// caller that needs whole revisions asks again from the last revision it
	// saw). With withPrev, each event's PrevKv holds the row the change
	// replaced (nil if the key did not exist before it).
	Changes(ctx context.Context, fromRev, toRev int64, limit int, withPrev bool) ([]Change, error)

	// Leases returns every lease in ascending ID order.
	Leases(ctx context.Context) ([]Lease, error)

	// Lease returns lease id; ok is false if it does not exist. Whether a
	// lease exists is decided here, inside the transaction, never from a
	// Store's memory: with several Stores on one database (postgres) only
	// the database knows what the others granted and revoked.
	Lease(ctx context.Context, id int64) (l Lease, ok bool, err error)

	// Alarms returns the active alarms in (member, type) order.
	Alarms(ctx context.Context) ([]*pb.AlarmMember, error)

	// LeaseKeys returns the live keys attached to lease id, in ascending order.
	LeaseKeys(ctx context.Context, id int64) ([][]byte, error)

	// AuthState returns the authentication state (users, roles, whether
	// auth is enabled, its revision) as PutAuthState last stored it, or nil
	// if it never was. The Store encodes it; a driver keeps the bytes.
	AuthState(ctx context.Context) ([]byte, error)

	// Rollback ends the transaction, discarding any writes.
	Rollback() error
}

// WriteTx is the single write transaction. Its reads see its own writes.
type WriteTx interface {
	ReadTx

	// Put appends a row for kv.Key at kv.ModRevision with sub-revision sub and
	// makes it the live row of the key. kv is complete: CreateRevision,
	// Version and Lease are already computed.
	Put(ctx context.Context, kv *mvccpb.KeyValue, sub int64) error

	// Delete appends a tombstone row for key at rev/sub and removes the key
	// from the live index.
	Delete(ctx context.Context, key []byte, rev, sub int64) error

	// SetRevisions records the current and compacted revisions.
	SetRevisions(ctx context.Context, current, compacted int64) error

	// PutLease creates or replaces a lease.
	PutLease(ctx context.Context, l Lease) error

	// DeleteLease removes a lease. Keys are detached by the caller (it
	// deletes them) before the lease is removed.
	DeleteLease(ctx context.Context, id int64) error

	// PutAuthState replaces the authentication state.
	PutAuthState(ctx context.Context, state []byte) error

	// PutAlarm records an active alarm (a no-op if it is recorded already);
	// DeleteAlarm removes one (a no-op if it is not recorded).
	PutAlarm(ctx context.Context, a *pb.AlarmMember) error
	DeleteAlarm(ctx context.Context, a *pb.AlarmMember) error

	// CompactBatch physically removes, among rows with fromRev <= revision <=
	// toRev, the ones that are no longer visible at revision compacted:
	// rows superseded by a newer row of the same key with revision <=
	// compacted, and tombstones with revision <= compacted. Callers keep
	// toRev <= compacted and walk the range in bounded steps so writers are
	// never blocked for long. It returns the number of rows removed.
	CompactBatch(ctx context.Context, compacted, fromRev, toRev int64) (int64, error)

	// Commit makes every write of the transaction durable (fsynced) and
	// visible, or fails and leaves no trace of any of them.
	Commit() error
}

// Prefetcher is implemented by a Backend whose reads each cost a round trip
// to a database server (postgres). The writer names the single keys a batch's
// requests will read (the keys of puts, of single-key compares, ranges and
// deletes) when it begins the batch's transaction; the driver reads their
// live rows in the same round trip as the begin and answers Get, and latest
// single-key Range, of those keys from memory, its own writes included. A
// key it was not given is read as usual. Prefetching is an optimisation: it
// must not change any answer.
type Prefetcher interface {
	// BeginWritePrefetch is BeginWrite, with keys prefetched.
	BeginWritePrefetch(ctx context.Context, keys [][]byte) (WriteTx, error)
}

// Change is one row of the revision log as the watch machinery sees it.
type Change struct {
	// Sub is the position of the change inside its revision.
	Sub int64
	// Deleted is true for a tombstone; KV then carries only Key and
	// ModRevision, as etcd's DELETE events do.
	Deleted bool
	KV      *mvccpb.KeyValue
	// PrevKV is filled only when asked for (Changes withPrev, or by Apply).
	PrevKV *mvccpb.KeyValue
	// PartialPrev says PrevKV lacks its value: the write was evaluated
	// when no watcher asked for prev_kv (evaluator.prevValues), so its
	// previous row was read without the value. The watch hub sends such a
	// change to a prev_kv watcher only through a read of the log, which
	// has the value.
	PartialPrev bool
}

// RowMetaReader is a ReadTx that reads a key's live row without its value
// more cheaply than Get: memtail answers it from a row cache that keeps
// no values for keys written that way. The evaluator asks it for the row
// a put or delete replaces when nothing will send that row's value (no
// prev_kv in the request, no prev_kv watcher): the write needs only the
// row's create revision, version and lease. A ReadTx without it is asked
// Get.
type RowMetaReader interface {
	// GetMeta is Get, with the row's Value nil.
	GetMeta(ctx context.Context, key []byte) (*mvccpb.KeyValue, error)
}

// Lease is the durable part of a lease. Its remaining time lives in memory
// (the lessor), as in etcd: a restart gives every lease its full TTL again.
type Lease struct {
	ID  int64
	TTL int64 // granted TTL in seconds
}
