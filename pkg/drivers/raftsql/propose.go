package raftsql

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/raft/v3"
	"google.golang.org/protobuf/proto"

	"github.com/kite-db/kite/pkg/mvcc"
)

// requestTimeout bounds how long a proposal waits to be applied when its
// client set no deadline: etcd's 5 s plus two election timeouts, time for
// a leader to be elected and to commit.
func (n *Node) requestTimeout() time.Duration { return 5*time.Second + 2*n.cfg.Election }

// Propose implements mvcc.Replicator.
func (n *Node) Propose(ctx context.Context, r *pb.InternalRaftRequest) (proto.Message, error) {
	id := n.ids.next()
	r.Header = &pb.RequestHeader{ID: id}
	data, err := proto.Marshal(r)
	if err != nil {
		return nil, err
	}
	if len(data) > n.cfg.MaxRequestBytes+1024 {
		return nil, mvcc.ErrRequestTooLarge
	}
	ch := n.waits.register(id)
	defer n.waits.cancel(id)
	// etcd's proposals_pending and proposals_failed_total: a proposal is
	// pending from its hand-off to raft until its outcome or its failure,
	// and failed when it never came back (dropped, no leader, timed out,
	// member stopping), not when its request was refused on apply.
	n.metrics.proposalsPending.Add(1)
	defer n.metrics.proposalsPending.Add(-1)
	cctx, cancel := context.WithTimeout(ctx, n.requestTimeout())
	defer cancel()
	propose := n.node.Propose
	if n.packq != nil {
		propose = n.proposeQueued
	}
	if err := propose(cctx, data); err != nil {
		n.metrics.proposalsFailed.Add(1)
		return nil, n.proposalError(ctx, err)
	}
	mvcc.TraceStepOf(ctx, "proposed to raft")
	select {
	case o := <-ch:
		mvcc.TraceStepOf(ctx, "committed by raft and applied on this member")
		return o.Resp, o.Err
	case <-cctx.Done():
		n.metrics.proposalsFailed.Add(1)
		return nil, n.proposalError(ctx, cctx.Err())
	case <-n.ctx.Done():
		n.metrics.proposalsFailed.Add(1)
		return nil, mvcc.ErrStopped
	}
}

// proposalError turns a proposal that did not come back into etcd's
// answer: the client's own cancellation, a stopped member, no leader, or
// etcd's "request timed out" (Unavailable: clients retry).
func (n *Node) proposalError(clientCtx context.Context, err error) error {
	switch {
	case clientCtx.Err() != nil:
		return clientCtx.Err()
	case n.ctx.Err() != nil, errors.Is(err, raft.ErrStopped):
		return mvcc.ErrStopped
	case n.lead.Load() == raft.None:
		return mvcc.ErrNoLeader
	case errors.Is(err, raft.ErrProposalDropped):
		return mvcc.ErrTimeout
	}
	return mvcc.ErrTimeout
}

// idGenerator makes request IDs unique across the cluster and across
// restarts, as etcd's: the member ID's low 16 bits, then the start time in
// milliseconds, then a counter.
type idGenerator struct {
	prefix uint64
	suffix atomic.Uint64
}

func newIDGenerator(member uint64, now time.Time) *idGenerator {
	g := &idGenerator{prefix: member << 48}
	g.suffix.Store(uint64(now.UnixMilli()) & (1<<40 - 1) << 8)
	return g
}

func (g *idGenerator) next() uint64 {
	return g.prefix | (g.suffix.Add(1) & (1<<48 - 1))
}

// waitList pairs the proposals of this node with their outcomes.
type waitList struct {
	mu sync.Mutex
	m  map[uint64]chan mvcc.Outcome
}

func newWaitList() *waitList { return &waitList{m: map[uint64]chan mvcc.Outcome{}} }

func (w *waitList) register(id uint64) <-chan mvcc.Outcome {
	ch := make(chan mvcc.Outcome, 1)
	w.mu.Lock()
	w.m[id] = ch
	w.mu.Unlock()
	return ch
}

func (w *waitList) cancel(id uint64) {
	w.mu.Lock()
	delete(w.m, id)
	w.mu.Unlock()
}

func (w *waitList) trigger(id uint64, o mvcc.Outcome) {
	w.mu.Lock()
	ch, ok := w.m[id]
	delete(w.m, id)
	w.mu.Unlock()
	if ok {
		ch <- o
	}
}

// Primary implements mvcc.Replicator.
func (n *Node) Primary() <-chan bool { return n.primary }
