package raftsql

import (
	"context"
	"encoding/binary"
	"sync"
	"time"

	"go.etcd.io/raft/v3"

	"github.com/kite-db/kite/pkg/mvcc"
)

// readBarrier batches linearizable reads as etcd does: every read that
// arrives while one ReadIndex round is in flight waits for the next round,
// so a burst of reads costs one heartbeat round to the quorum, not one each.
type readBarrier struct {
	n *Node

	mu      sync.Mutex
	waiting *readRound // the round new reads join
	wake    chan struct{}
	states  chan raft.ReadState
}

// readRound is one ReadIndex round: done is closed once the node has
// applied up to the read index (or err says why not).
type readRound struct {
	done chan struct{}
	err  error
}

func newReadBarrier(n *Node) *readBarrier {
	return &readBarrier{n: n, waiting: &readRound{done: make(chan struct{})},
		wake: make(chan struct{}, 1), states: make(chan raft.ReadState, 16)}
}

// ReadBarrier implements mvcc.Replicator.
func (n *Node) ReadBarrier(ctx context.Context) error {
	rb := n.reads
	rb.mu.Lock()
	round := rb.waiting
	rb.mu.Unlock()
	select {
	case rb.wake <- struct{}{}:
	default:
	}
	select {
	case <-round.done:
		return round.err
	case <-ctx.Done():
		return ctx.Err()
	case <-n.ctx.Done():
		return mvcc.ErrStopped
	}
}

// deliver passes a ReadState from the Ready loop.
func (rb *readBarrier) deliver(rs raft.ReadState) {
	select {
	case rb.states <- rs:
	default: // a stale answer nobody waits for
	}
}

func (rb *readBarrier) loop() {
	var seq uint64
	for {
		select {
		case <-rb.n.ctx.Done():
			return
		case <-rb.wake:
		}
		rb.mu.Lock()
		round := rb.waiting
		rb.waiting = &readRound{done: make(chan struct{})}
		rb.mu.Unlock()
		seq++
		round.err = rb.confirm(seq)
		close(round.done)
	}
}

// confirm asks raft for the read index (the leader's commit index,
// confirmed by a quorum) and waits until this node has applied it.
func (rb *readBarrier) confirm(seq uint64) error {
	n := rb.n
	rctx := make([]byte, 8)
	binary.BigEndian.PutUint64(rctx, seq)
	deadline := time.Now().Add(n.requestTimeout())
	var index uint64
	for index == 0 {
		if time.Now().After(deadline) {
			if n.lead.Load() == raft.None {
				return mvcc.ErrNoLeader
			}
			return mvcc.ErrTimeout
		}
		ctx, cancel := context.WithTimeout(n.ctx, n.cfg.Election)
		err := n.node.ReadIndex(ctx, rctx)
		cancel()
		if err != nil {
			if n.ctx.Err() != nil {
				return mvcc.ErrStopped
			}
			continue
		}
		// Raft drops a request it cannot serve (no leader yet): ask again
		// after a while rather than wait forever.
		retry := time.NewTimer(n.cfg.Election / 2)
	wait:
		for {
			select {
			case rs := <-rb.states:
				if binary.BigEndian.Uint64(rs.RequestCtx) == seq {
					index = rs.Index
					break wait
				}
			case <-retry.C:
				break wait
			case <-n.ctx.Done():
				retry.Stop()
				return mvcc.ErrStopped
			}
		}
		retry.Stop()
	}
	for n.applied.Load() < index {
		changed := n.appliedChanged()
		if n.applied.Load() >= index {
			break
		}
		select {
		case <-changed:
		case <-n.ctx.Done():
			return mvcc.ErrStopped
		case <-time.After(time.Until(deadline)):
			return mvcc.ErrTimeout
		}
	}
	return nil
}
