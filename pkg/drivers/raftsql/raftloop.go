package raftsql

import (
	"context"
	"sync"
	"sync/atomic"

	"go.etcd.io/etcd/server/v3/etcdserver/api/rafthttp"
	"go.etcd.io/etcd/server/v3/etcdserver/api/snap"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// raftLoop is the state of the raft side of a member: raft itself, its
// durable log (the WAL and the snapshot files), the in-memory log raft
// reads, the peer transport, and what the Ready and apply loops
// (ready.go, snapshot.go) publish to the rest of the member: the applied
// index, raft's leader, term and commit index, the metrics. Node embeds
// it; the loops are Node's methods because each Ready also drives the
// Store's applier, the proposals' waits and the membership.
type raftLoop struct {
	wal         *wal.WAL
	snapshotter *snap.Snapshotter
	storage     *raft.MemoryStorage
	raftCfg     *raft.Config
	restart     bool // raft state came from the WAL
	joined      bool // a new member of a running cluster: raft starts empty
	node        raft.Node
	transport   *rafthttp.Transport

	// Written by the apply loop, or by the Ready loop while the apply loop
	// is idle (a received snapshot).
	confState *raftpb.ConfState
	snapIndex uint64
	// sinceSnap counts the requests applied since this process took its
	// last snapshot (snapshot.go).
	sinceSnap uint64
	// bytesSinceSnap is the size of the entries applied since then.
	bytesSinceSnap uint64
	// lastApplied is the applied state a snapshot sent to a follower
	// describes (snapshot.go).
	lastApplied atomic.Pointer[appliedState]

	// applied is the index of the last entry applied to the database;
	// appliedc is closed and replaced each time it moves.
	applied   atomic.Uint64
	appliedMu sync.Mutex
	appliedc  chan struct{}

	lead, term, committed atomic.Uint64
	metrics               nodeMetrics // ready.go

	// applyc carries committed entries from the Ready loop to the apply
	// loop (ready.go).
	applyc chan applyJob
	// primary tells the Store whether this member leads; the Ready loop
	// closes it when it ends.
	primary chan bool
	// packq carries proposals to the packer (pack.go); nil when
	// Config.PackProposals is off and each request is its own entry.
	packq chan *proposal
}

func (r *raftLoop) setApplied(idx uint64) {
	if idx <= r.applied.Load() {
		return
	}
	r.applied.Store(idx)
	r.appliedMu.Lock()
	close(r.appliedc)
	r.appliedc = make(chan struct{})
	r.appliedMu.Unlock()
}

// appliedChanged returns a channel closed when the applied index moves.
func (r *raftLoop) appliedChanged() <-chan struct{} {
	r.appliedMu.Lock()
	defer r.appliedMu.Unlock()
	return r.appliedc
}

// The rafthttp.Raft side of the member, but for IsIDRemoved
// (membership.go): what the transport receives goes to raft.

func (r *raftLoop) Process(ctx context.Context, m *raftpb.Message) error {
	return r.node.Step(ctx, m)
}
func (r *raftLoop) ReportUnreachable(id uint64) { r.node.ReportUnreachable(id) }
func (r *raftLoop) ReportSnapshot(id uint64, status raft.SnapshotStatus) {
	r.node.ReportSnapshot(id, status)
}
