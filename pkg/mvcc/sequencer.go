package mvcc

import (
	"context"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"
)

// sequencer is how this Store's writes are put in order, and what follows
// from that order: when a read sees every acknowledged write, and whose
// clocks decide that a lease expired. A Store has one, chosen when it opens
// from what its Backend is; everything that differs between storage modes
// lives in the three implementations, and no other code of the Store asks
// which mode it runs in.
//
//   - localSequencer: this Store is its storage's only writer (sqlite). Its
//     writer goroutine orders writes; reads and lease clocks are local.
//   - sharedSequencer: several Stores write one storage (postgres, Shared).
//     The storage's revision lock orders writes across them; each Store
//     follows the others' commits through the storage's notices.
//   - replicatedSequencer: a replicated log orders writes (raftsql,
//     Replicator). Writes are proposed and applied when the log hands them
//     back; reads wait for the log's read barrier; the leader's clocks
//     decide expiry.
type sequencer interface {
	// start begins ordering once the Store has loaded its state: the
	// goroutines the sequencer needs run until the Store's context ends
	// (counted in the Store's WaitGroup).
	start() error

	// write puts r in the order of writes and returns the outcome of
	// applying it here: its response, or the error that rejected it. If
	// ctx ends first the request may still be applied, as with etcd.
	write(ctx context.Context, r *pb.InternalRaftRequest) (proto.Message, error)

	// readBarrier returns once every write acknowledged before it was
	// called is visible to this Store's reads (linearizability).
	readBarrier(ctx context.Context) error

	// sync returns once this Store's feed holds every revision its storage
	// had committed when sync was called, whoever committed it, with the
	// lease table re-read: a lease granted through another server a moment
	// ago is known after it.
	sync(ctx context.Context) error

	// renewLease restarts lease id's clock where expiry is decided and
	// returns its TTL (ErrLeaseNotFound if it does not exist or expired).
	renewLease(ctx context.Context, id int64) (ttl int64, err error)

	// leaseTimeToLive answers from the clocks that decide expiry.
	leaseTimeToLive(ctx context.Context, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error)

	// revokeExpired revokes lease id, whose time is up by this Store's
	// clock. A sequencer whose storage keeps a clock of its own refuses
	// the revoke with errLeaseRenewed when that clock says the lease was
	// renewed within its TTL.
	revokeExpired(ctx context.Context, id int64) error

	// appliesLogEntries says whether writes reach the commit tail as a
	// replicated log's committed entries (Store.Apply) rather than as
	// requests this Store orders itself. The tail treats such a batch
	// apart: it records the batch's last index with its rows, never
	// retries it for a concurrent writer (there is none), and never
	// splits it, since the requests of one packed entry share an index.
	appliesLogEntries() bool

	// beginBatch begins the transaction a batch of writes is applied in.
	// applied is the same transaction when the sequencer
	// appliesLogEntries (the batch's last index is recorded in it), else
	// nil.
	beginBatch(reqs []*request) (tx WriteTx, applied AppliedIndexTx, err error)
}

// newSequencer picks the sequencer for b. A Shared backend is subscribed
// to here, before the Store loads its state, so that no commit after the
// load can be missed.
func newSequencer(s *Store, b Backend) sequencer {
	if r, ok := b.(Replicator); ok {
		return &replicatedSequencer{s: s, repl: r}
	}
	if sh, ok := b.(Shared); ok {
		return &sharedSequencer{s: s, shared: sh, notices: sh.Notices()}
	}
	s.primary.Store(true)
	return &localSequencer{s: s}
}

// localSequencer orders the writes of a Store that is its storage's only
// writer: its writer goroutine's queue is the order.
type localSequencer struct{ s *Store }

func (q *localSequencer) start() error {
	if _, compacted := q.s.Revisions(); compacted > 0 {
		// A crash may have cut a physical compaction short: finish it.
		q.s.physical.notify(compacted)
	}
	return nil
}

func (q *localSequencer) appliesLogEntries() bool { return false }

func (q *localSequencer) beginBatch(reqs []*request) (WriteTx, AppliedIndexTx, error) {
	tx, err := q.s.beginWrite(reqs)
	return tx, nil, err
}

func (q *localSequencer) write(ctx context.Context, r *pb.InternalRaftRequest) (proto.Message, error) {
	return q.s.enqueueWrite(ctx, r)
}

// Every acknowledged write was committed before its answer.
func (q *localSequencer) readBarrier(context.Context) error { return nil }
func (q *localSequencer) sync(context.Context) error        { return nil }

func (q *localSequencer) renewLease(_ context.Context, id int64) (int64, error) {
	return q.s.lessor.renew(id)
}

func (q *localSequencer) revokeExpired(ctx context.Context, id int64) error {
	_, err := q.write(ctx, revokeRequest(id))
	return err
}

// revokeRequest is the revoke the expiry loop asks for.
func revokeRequest(id int64) *pb.InternalRaftRequest {
	return &pb.InternalRaftRequest{LeaseRevoke: &pb.LeaseRevokeRequest{ID: id}}
}

func (q *localSequencer) leaseTimeToLive(ctx context.Context, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	return q.s.localTimeToLive(ctx, r)
}

// localTimeToLive answers a TimeToLive from this Store's own lessor.
func (s *Store) localTimeToLive(ctx context.Context, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	granted, left, ok := s.lessor.remaining(r.ID)
	if !ok {
		return nil, ErrLeaseNotFound
	}
	resp := &pb.LeaseTimeToLiveResponse{Header: &pb.ResponseHeader{Revision: s.current.Load()}, ID: r.ID, TTL: left, GrantedTTL: granted}
	if r.Keys {
		if err := s.guard.lost(); err != nil {
			return nil, err
		}
		tx, err := s.b.BeginRead(ctx)
		if err != nil {
			return nil, fmt.Errorf("begin read: %w", err)
		}
		defer tx.Rollback()
		if resp.Keys, err = tx.LeaseKeys(ctx, r.ID); err != nil {
			return nil, fmt.Errorf("keys of lease %d: %w", r.ID, err)
		}
	}
	return resp, nil
}
