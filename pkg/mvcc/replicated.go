package mvcc

import (
	"context"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"
)

// Replicator is implemented by a Backend whose writes are ordered by a
// replicated log before they are applied (pkg/drivers/raftsql): every node
// of the cluster has its own storage and its own Store, and applies the
// same write requests in the same order. A Store over a Replicator never
// applies a client's write directly: it proposes it, and applies it when
// the log hands it back through Apply, on every node alike.
type Replicator interface {
	// Start begins replication once the Store is ready to apply: the
	// replicator calls a.Apply for every committed entry after the one the
	// storage last recorded (AppliedIndexTx), in log order, from one
	// goroutine, until the Store closes.
	Start(a Applier) error

	// Propose puts r into the log and returns the outcome of applying it on
	// this node: the response, or the request's error. If ctx ends first
	// the request may still be applied, as with etcd.
	Propose(ctx context.Context, r *pb.InternalRaftRequest) (proto.Message, error)

	// ReadBarrier returns once this node has applied every entry the
	// cluster had committed when it was called, so that a read that
	// follows sees every write acknowledged before it (etcd's ReadIndex).
	ReadBarrier(ctx context.Context) error

	// BeginAppliedWrite begins a write transaction of this node's storage
	// that also records the index of the last entry it applies
	// (AppliedIndexTx): the Store applies each batch of entries in one, so
	// that after a crash the log is replayed from exactly the first entry
	// the storage lacks.
	BeginAppliedWrite(ctx context.Context) (AppliedWriteTx, error)

	// Primary reports leadership changes: true when this node becomes the
	// one that decides lease expiry and runs the cluster's once-only jobs.
	// The channel is closed when replication stops.
	Primary() <-chan bool

	// LeaseRenewAtLeader and LeaseTimeToLiveAtLeader ask the leader, whose
	// clocks decide expiry, when this node is a follower.
	LeaseRenewAtLeader(ctx context.Context, id int64) (ttl int64, err error)
	LeaseTimeToLiveAtLeader(ctx context.Context, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error)
}

// Applier is the Store's side of replication, called by the Replicator.
type Applier interface {
	// Apply applies committed entries in one storage transaction that also
	// records the index of the last one. It returns each entry's outcome.
	// An error means the storage failed: the node must stop rather than
	// diverge from the others, and replays the entries after a restart.
	Apply(ctx context.Context, entries []Entry) ([]Outcome, error)

	// Restore makes the Store follow its storage again after the
	// replicator replaced the storage's contents with a snapshot of
	// another node's: revisions, leases and alarms are read back, and
	// watchers are sent the revisions between as ordinary events.
	Restore(ctx context.Context) error

	// LeaseRenew and LeaseTimeToLive answer, on the leader, the requests
	// followers forward to it (Replicator.LeaseRenewAtLeader and
	// LeaseTimeToLiveAtLeader): the leader's clocks decide expiry.
	LeaseRenew(ctx context.Context, id int64) (ttl int64, err error)
	LeaseTimeToLive(ctx context.Context, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error)

	// HashKV hashes the key space at rev, for the corruption check that
	// compares members.
	HashKV(ctx context.Context, rev int64) (*pb.HashKVResponse, error)

	// Alarm raises or lists alarms through the log (the CORRUPT alarm of
	// a member whose hash differs).
	Alarm(ctx context.Context, r *pb.AlarmRequest) (*pb.AlarmResponse, error)
}

// Entry is one committed write request with its position in the log.
type Entry struct {
	Index uint64
	Req   *pb.InternalRaftRequest
}

// Outcome is what applying one Entry answered.
type Outcome struct {
	Resp proto.Message
	Err  error
}

// AppliedIndexTx is implemented by the write transaction of a Backend that
// a Replicator drives: the index of the last applied entry is stored in the
// same transaction as the entry's rows, so that after a crash the log is
// replayed from exactly the first entry the storage lacks.
type AppliedIndexTx interface {
	SetAppliedIndex(ctx context.Context, index uint64) error
}

// AppliedWriteTx is a write transaction that records the applied index
// (Replicator.BeginAppliedWrite).
type AppliedWriteTx interface {
	WriteTx
	AppliedIndexTx
}

// AppliedReadTx is a read transaction that tells the applied index its
// snapshot holds: a layer over the storage (pkg/mvcc/memtail) merges into
// it only the batches after that index.
type AppliedReadTx interface {
	ReadTx
	AppliedIndex(ctx context.Context) (uint64, error)
}

// Apply implements Applier. It runs on the writer's goroutine, so entries
// are applied in order with the maintenance steps (physical compaction)
// between batches, as local writes are in the other modes.
func (s *Store) Apply(ctx context.Context, entries []Entry) ([]Outcome, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	j := &entriesJob{waiter: newWaiter(), ctx: ctx, entries: entries}
	if err := s.enqueue(ctx, j, &j.waiter); err != nil {
		return nil, err
	}
	return j.outcomes, nil
}

// applyEntries applies committed entries through the commit tail, on the
// writer's goroutine. Unlike a batch of local writes, a failure is not an
// answer to the clients: it is returned to the replicator, which stops the
// node.
func (s *Store) applyEntries(entries []Entry) ([]Outcome, error) {
	reqs := make([]*request, len(entries))
	for i, e := range entries {
		reqs[i] = &request{ctx: s.ctx, req: e.Req, index: e.Index}
	}
	if err := s.commit(reqs); err != nil {
		return nil, err
	}
	outcomes := make([]Outcome, len(reqs))
	for i, r := range reqs {
		outcomes[i] = Outcome{Resp: r.resp, Err: r.err}
	}
	return outcomes, nil
}

// Restore implements Applier: it re-reads everything the Store keeps in
// memory from the storage, on the writer's goroutine, and publishes the
// revisions the storage gained to watchers.
func (s *Store) Restore(ctx context.Context) error {
	j := &restoreJob{waiter: newWaiter()}
	return s.enqueue(ctx, j, &j.waiter)
}

func (s *Store) restore(ctx context.Context) error {
	tx, current, _, err := s.beginRead(ctx)
	if err != nil {
		return err
	}
	tx.Rollback()
	if current < s.current.Load() {
		// A snapshot is only sent to a node that is behind it.
		return fmt.Errorf("mvcc: restored storage is at revision %d, behind this node's %d", current, s.current.Load())
	}
	if err := s.readLog(ctx, 0, ChangedLeases|ChangedAlarms|ChangedCompacted|ChangedAuth); err != nil {
		return err
	}
	s.quota.refresh(ctx)
	return nil
}
