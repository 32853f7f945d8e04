package mvcc

import (
	"context"
	"errors"
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

// errNotAppliedIndexTx: a Replicator over a storage that cannot record the
// applied index could apply an entry twice after a crash.
var errNotAppliedIndexTx = errors.New("mvcc: replicated storage's write transaction does not record the applied index")

// Apply implements Applier. It runs on the writer's goroutine, so entries
// are applied in order with the maintenance steps (physical compaction)
// between batches, as local writes are in the other modes.
func (s *Store) Apply(ctx context.Context, entries []Entry) ([]Outcome, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	p := &pending{ctx: ctx, entries: entries, done: make(chan struct{})}
	if _, err := s.enqueue(ctx, p); err != nil {
		return nil, err
	}
	return p.outcomes, nil
}

// applyEntries applies p.entries, on the writer's goroutine. Unlike a
// batch of local writes, a failure is not an answer to the clients: it is
// returned to the replicator, which stops the node.
func (s *Store) applyEntries(p *pending) {
	defer close(p.done)
	batch := make([]*pending, len(p.entries))
	for i, e := range p.entries {
		batch[i] = &pending{ctx: p.ctx, req: e.Req}
	}
	last := p.entries[len(p.entries)-1].Index
	revs, err := s.applyAndCommitAt(batch, last)
	var applyErr *applyError
	if err != nil && len(batch) > 1 && errors.As(err, &applyErr) && errors.Is(err, ErrTooManyChanges) {
		// One request exceeds what a transaction can hold: apply each
		// entry in a transaction of its own, as every node does alike.
		p.outcomes = make([]Outcome, 0, len(p.entries))
		for _, e := range p.entries {
			one := &pending{ctx: p.ctx, entries: []Entry{e}, done: make(chan struct{})}
			s.applyEntries(one)
			if one.err != nil {
				p.err = one.err
				return
			}
			p.outcomes = append(p.outcomes, one.outcomes...)
		}
		return
	}
	if err != nil && len(batch) == 1 && errors.As(err, &applyErr) && errors.Is(err, ErrTooManyChanges) {
		// Every node fails this request alike: an answer, not a fault.
		// The entry is recorded applied so a replay does not retry it.
		// Any other storage error (a full disk, an I/O error, a failed
		// read inside a compare) is this node's own: it is returned, and
		// the node stops rather than differ from the others.
		if serr := s.recordApplied(last); serr != nil {
			p.err = serr
			return
		}
		p.outcomes = []Outcome{{Err: err}}
		return
	}
	if err != nil {
		p.err = err
		return
	}
	for _, c := range revs {
		s.current.Store(c.rev)
		s.hub.publish(c.rev, c.changes)
	}
	p.outcomes = make([]Outcome, len(batch))
	for i, b := range batch {
		p.outcomes[i] = Outcome{Resp: b.resp, Err: b.err}
	}
	s.quota.afterCommit(s.ctx)
}

// recordApplied stores the applied index alone.
func (s *Store) recordApplied(index uint64) error {
	tx, err := s.b.BeginWrite(s.ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	at, ok := tx.(AppliedIndexTx)
	if !ok {
		_ = tx.Rollback()
		return errNotAppliedIndexTx
	}
	if err := at.SetAppliedIndex(s.ctx, index); err != nil {
		_ = tx.Rollback()
		return fmt.Errorf("record applied index: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit applied index: %w", err)
	}
	return nil
}

// Restore implements Applier: it re-reads everything the Store keeps in
// memory from the storage, on the writer's goroutine, and publishes the
// revisions the storage gained to watchers.
func (s *Store) Restore(ctx context.Context) error {
	p := &pending{ctx: ctx, restore: true, done: make(chan struct{})}
	_, err := s.enqueue(ctx, p)
	return err
}

func (s *Store) restore(ctx context.Context) error {
	tx, current, _, err := s.snapshot(ctx)
	if err != nil {
		return err
	}
	if current < s.current.Load() {
		// A snapshot is only sent to a node that is behind it.
		tx.Rollback()
		return fmt.Errorf("mvcc: restored storage is at revision %d, behind this node's %d", current, s.current.Load())
	}
	tx.Rollback()
	if err := s.catchUp(ctx, 0, ChangedLeases|ChangedAlarms|ChangedCompacted); err != nil {
		return err
	}
	if err := s.reloadAuth(ctx); err != nil {
		return err
	}
	s.quota.refresh(ctx)
	return nil
}

// linearizable is the barrier in front of a read that must see every write
// acknowledged before it. Locally applied writes already are; a replicated
// node asks the cluster.
func (s *Store) linearizable(ctx context.Context, serializable bool) error {
	if s.repl == nil || serializable {
		return nil
	}
	if err := s.repl.ReadBarrier(ctx); err != nil {
		return fmt.Errorf("linearizable read: %w", err)
	}
	return nil
}
