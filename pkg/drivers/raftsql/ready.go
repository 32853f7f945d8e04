package raftsql

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/kite-db/kite/pkg/mvcc"
)

// run is the Ready loop: the one goroutine that talks to raft. For each
// Ready it makes the new entries durable in the WAL, sends the messages,
// hands the committed entries to the apply loop and advances, so the next
// entries are written while these are applied (as etcd pipelines them). An
// entry is acknowledged to its client after this node applied it, and a
// restart replays the WAL from the database's applied index.
func (n *Node) run() {
	ticker := time.NewTicker(n.cfg.Heartbeat)
	defer ticker.Stop()
	defer close(n.primary)
	isLeader := false
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-ticker.C:
			n.node.Tick()
		case err := <-n.transport.ErrorC:
			n.fail(fmt.Errorf("peer transport: %w", err))
			return
		case rd := <-n.node.Ready():
			if rd.SoftState != nil {
				// Counted as etcd counts leader_changes_seen_total: each
				// time a leader is known and differs from the last one,
				// so losing the leader is not a change, finding one is.
				if lead := rd.SoftState.Lead; lead != raft.None && lead != n.lead.Load() {
					n.metrics.leaderChanges.Add(1)
				}
				n.lead.Store(rd.SoftState.Lead)
				if leader := rd.SoftState.Lead == n.id; leader != isLeader {
					isLeader = leader
					n.log.Info("leadership changed", "leader", leader, "lead", fmt.Sprintf("%x", rd.SoftState.Lead))
					select {
					case n.primary <- leader:
					case <-n.ctx.Done():
						return
					}
				}
			}
			if rd.HardState != nil && !raft.IsEmptyHardState(rd.HardState) {
				n.term.Store(rd.HardState.GetTerm())
				n.committed.Store(rd.HardState.GetCommit())
			}
			for _, rs := range rd.ReadStates {
				n.reads.deliver(rs)
			}
			// A leader may send its entries before it has written them
			// itself (raft's thesis, 10.2.1; etcd does): the fsyncs of
			// leader and followers overlap. A follower's answers must wait
			// for its own write.
			if isLeader {
				n.send(rd.Messages)
			}
			if rd.Snapshot != nil && !raft.IsEmptySnap(rd.Snapshot) {
				// The received database replaces what the entries before
				// it were applied to: let those finish first.
				if !n.waitApplyJob(applyJob{}) {
					return
				}
			}
			if err := n.persist(rd); err != nil {
				n.fail(err)
				return
			}
			if !isLeader {
				n.send(rd.Messages)
			}
			if len(rd.CommittedEntries) > 0 {
				job := applyJob{ents: rd.CommittedEntries}
				if hasConfChange(job.ents) {
					// Raft must know the new configuration before the next
					// Ready, as etcd waits for it.
					if !n.waitApplyJob(job) {
						return
					}
				} else {
					select {
					case n.applyc <- job:
					case <-n.ctx.Done():
						return
					}
				}
			}
			n.node.Advance()
		}
	}
}

// nodeMetrics are the counts behind etcd's server metrics that only the
// Ready loop and Propose see. They are plain atomics, not prometheus
// collectors: the server that embeds the node owns the registry and reads
// them through Metrics at scrape time.
type nodeMetrics struct {
	leaderChanges    atomic.Uint64
	proposalsPending atomic.Int64
	proposalsFailed  atomic.Uint64
}

// Metrics returns etcd's leader_changes_seen_total, proposals_pending and
// proposals_failed_total of this member, counted since it started.
func (n *Node) Metrics() (leaderChanges uint64, proposalsPending int64, proposalsFailed uint64) {
	return n.metrics.leaderChanges.Load(), n.metrics.proposalsPending.Load(), n.metrics.proposalsFailed.Load()
}

// ObserveCommits makes every commit of the member's database (the apply
// of committed entries, or with Config.ApplyBehind the flush of many)
// report its duration to observe, also after the database is replaced by
// a snapshot from the leader. nil stops it.
func (n *Node) ObserveCommits(observe func(time.Duration)) {
	d := n.db
	d.mu.Lock()
	defer d.mu.Unlock()
	// replace reads opts while it reopens: change them only between
	// replacements.
	for d.replacing {
		d.idle.Wait()
	}
	d.opts.ObserveCommit = observe
	d.sq.ObserveCommits(observe)
}

// applyJob is committed entries for the apply loop; done, if set, is
// closed once they are applied.
type applyJob struct {
	ents []*raftpb.Entry
	done chan struct{}
}

// waitApplyJob queues job and waits until it and everything queued before
// it are applied. It reports false if the node stopped meanwhile.
func (n *Node) waitApplyJob(job applyJob) bool {
	job.done = make(chan struct{})
	select {
	case n.applyc <- job:
	case <-n.ctx.Done():
		return false
	}
	select {
	case <-job.done:
		return true
	case <-n.ctx.Done():
		return false
	}
}

// applyLoop applies committed entries in order and takes snapshots as the
// applied index grows. Entries of the Readys queued while the previous
// ones were applied are applied together, in one database transaction:
// under load the apply keeps up with the WAL by committing less often.
func (n *Node) applyLoop() {
	for {
		var job applyJob
		select {
		case <-n.ctx.Done():
			return
		case job = <-n.applyc:
		}
		ents := job.ents
		for job.done == nil && len(ents) < maxApplyBatch {
			select {
			case next := <-n.applyc:
				ents = append(ents[:len(ents):len(ents)], next.ents...)
				job.done = next.done
				continue
			default:
			}
			break
		}
		if err := n.apply(ents); err != nil {
			if errors.Is(err, mvcc.ErrClosed) {
				return // the Store is closing: Close follows
			}
			n.fail(err)
			return
		}
		n.maybeSnapshot()
		if job.done != nil {
			close(job.done)
		}
	}
}

// maxApplyBatch bounds the entries applied in one transaction.
const maxApplyBatch = 4096

func hasConfChange(ents []*raftpb.Entry) bool {
	for _, e := range ents {
		if e.GetType() != raftpb.EntryType_EntryNormal {
			return true
		}
	}
	return false
}

// persist writes a Ready's snapshot, hard state and entries to the WAL and
// the in-memory log, and installs a snapshot received from the leader.
func (n *Node) persist(rd raft.Ready) error {
	hasSnap := rd.Snapshot != nil && !raft.IsEmptySnap(rd.Snapshot)
	if hasSnap {
		// The database first: once the WAL records the snapshot, a restart
		// expects a database at least that new.
		if err := n.installSnapshot(rd.Snapshot); err != nil {
			return err
		}
		if err := n.saveSnapshot(rd.Snapshot); err != nil {
			return err
		}
	}
	hs := rd.HardState
	if hs == nil {
		hs = &raftpb.HardState{}
	}
	if err := n.wal.Save(hs, rd.Entries); err != nil {
		return fmt.Errorf("write WAL: %w", err)
	}
	if hasSnap {
		if err := n.storage.ApplySnapshot(rd.Snapshot); err != nil {
			return fmt.Errorf("apply snapshot to the raft log: %w", err)
		}
	}
	if err := n.storage.Append(rd.Entries); err != nil {
		return fmt.Errorf("append to the raft log: %w", err)
	}
	return nil
}

// apply hands committed normal entries to the Store in one batch and
// applies configuration changes. Writes the database already holds (a WAL
// replay after a restart, or a received database newer than the log) are
// skipped.
func (n *Node) apply(ents []*raftpb.Entry) error {
	if len(ents) == 0 {
		return nil
	}
	applied := n.applied.Load()
	var batch []mvcc.Entry
	last := applied
	for _, e := range ents {
		idx := e.GetIndex()
		last = max(last, idx)
		switch e.GetType() {
		case raftpb.EntryType_EntryNormal:
			if len(e.Data) == 0 {
				continue // a new leader's empty entry
			}
			reqs, err := decodeEntry(e.Data)
			if err != nil {
				return fmt.Errorf("decode entry %d: %w", idx, err)
			}
			n.sinceSnap += uint64(len(reqs))
			n.bytesSinceSnap += uint64(len(e.Data))
			for _, r := range reqs {
				if r.ClusterMemberAttrSet != nil {
					// Membership is not in the database: applied again on
					// every restart, as configuration changes are.
					n.cluster.setAttributes(r.ClusterMemberAttrSet)
					n.waits.trigger(r.GetHeader().GetID(), mvcc.Outcome{})
					continue
				}
				if idx <= applied {
					continue // already in the database
				}
				// A packed entry's requests share its index.
				batch = append(batch, mvcc.Entry{Index: idx, Req: r})
			}
		case raftpb.EntryType_EntryConfChange:
			// Raft learns its configuration only from the application, so
			// a change is applied again on every restart (the database
			// does not hold it), in order with the writes around it.
			if err := n.applyBatch(batch); err != nil {
				return err
			}
			batch = nil
			cc := &raftpb.ConfChange{}
			if err := proto.Unmarshal(e.Data, cc); err != nil {
				return fmt.Errorf("decode conf change %d: %w", idx, err)
			}
			n.applyConfChange(cc)
		default:
			return fmt.Errorf("entry %d: unsupported type %v", idx, e.GetType())
		}
	}
	if err := n.applyBatch(batch); err != nil {
		return err
	}
	n.setApplied(last)
	if e := ents[len(ents)-1]; e.GetIndex() == last {
		n.noteApplied(last, e.GetTerm())
	}
	return nil
}

func (n *Node) applyBatch(batch []mvcc.Entry) error {
	if len(batch) == 0 {
		return nil
	}
	outcomes, err := n.applier.Apply(n.ctx, batch)
	if err != nil {
		return fmt.Errorf("apply entries %d-%d: %w", batch[0].Index, batch[len(batch)-1].Index, err)
	}
	for i, e := range batch {
		if id := e.Req.GetHeader().GetID(); id != 0 {
			n.waits.trigger(id, outcomes[i])
		}
	}
	n.setApplied(batch[len(batch)-1].Index)
	return nil
}

// send hands raft's messages to the peer transport. A snapshot message
// carries this node's database, which is copied in the background.
func (n *Node) send(msgs []*raftpb.Message) {
	out := msgs[:0:0]
	for _, m := range msgs {
		if m.GetType() == raftpb.MessageType_MsgSnap {
			n.sendSnapshot(m)
			continue
		}
		out = append(out, m)
	}
	if len(out) > 0 {
		n.transport.Send(out)
	}
}
