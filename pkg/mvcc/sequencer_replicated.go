package mvcc

import (
	"context"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"
)

// replicatedSequencer orders writes through a replicated log: every node
// has its own storage and its own Store, proposes the writes it receives,
// and applies every committed entry when the log hands it back (Apply).
type replicatedSequencer struct {
	s    *Store
	repl Replicator
}

func (q *replicatedSequencer) appliesLogEntries() bool { return true }

// beginBatch: a replicated storage's transaction, typed to record the
// applied index; a batch of entries reads its keys as it goes.
func (q *replicatedSequencer) beginBatch([]*request) (WriteTx, AppliedIndexTx, error) {
	tx, err := q.repl.BeginAppliedWrite(q.s.ctx)
	if err != nil {
		return nil, nil, err
	}
	return tx, tx, nil
}

func (q *replicatedSequencer) start() error {
	s := q.s
	s.wg.Add(1)
	go s.roleLoop(s.ctx, q.repl.Primary())
	if _, compacted := s.Revisions(); compacted > 0 {
		// Physical compaction is every node's own work.
		s.physical.notify(compacted)
	}
	if err := q.repl.Start(s); err != nil {
		return fmt.Errorf("start replication: %w", err)
	}
	return nil
}

func (q *replicatedSequencer) write(ctx context.Context, r *pb.InternalRaftRequest) (proto.Message, error) {
	return q.repl.Propose(ctx, r)
}

func (q *replicatedSequencer) readBarrier(ctx context.Context) error {
	if err := q.repl.ReadBarrier(ctx); err != nil {
		return fmt.Errorf("linearizable read: %w", err)
	}
	traceFrom(ctx).step("linearizable read barrier (raft read index)")
	return nil
}

// Every entry this node applies is in its own feed.
func (q *replicatedSequencer) sync(context.Context) error { return nil }

// renewLease asks the leader when this node is a follower: only the
// leader's clocks decide expiry. The leader first waits for the read
// barrier: it may not have applied a grant its cluster committed yet.
func (q *replicatedSequencer) renewLease(ctx context.Context, id int64) (int64, error) {
	if !q.s.primary.Load() {
		return q.repl.LeaseRenewAtLeader(ctx, id)
	}
	if err := q.readBarrier(ctx); err != nil {
		return 0, err
	}
	return q.s.lessor.renew(id)
}

// The leader's clock alone decides: every renewal reaches it.
func (q *replicatedSequencer) revokeExpired(ctx context.Context, id int64) error {
	_, err := q.write(ctx, revokeRequest(id))
	return err
}

func (q *replicatedSequencer) leaseTimeToLive(ctx context.Context, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	if !q.s.primary.Load() {
		return q.repl.LeaseTimeToLiveAtLeader(ctx, r)
	}
	if err := q.readBarrier(ctx); err != nil {
		return nil, err
	}
	return q.s.localTimeToLive(ctx, r)
}
