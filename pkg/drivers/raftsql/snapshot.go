package raftsql

import (
	"errors"
	"fmt"
	"math"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/fileutil"
	"go.etcd.io/etcd/client/pkg/v3/types"
	"go.etcd.io/etcd/server/v3/etcdserver/api/snap"
	"go.etcd.io/etcd/server/v3/storage/wal/walpb"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Snapshots. The database itself is the state machine's snapshot: every
// transaction records the index it applied. Its commits are not synced one
// by one (localDBOptions sets sqlite.Options.NoCommitSync): the raft WAL,
// which persist writes and fsyncs before the entries reach the apply loop,
// is what makes an entry durable, and a machine crash that loses the
// database's last commits only replays them from the WAL on restart. So a
// raft snapshot needs no copy of the data: maybeSnapshot syncs the database
// file (syncDB), then records the index and configuration, after which the
// WAL and the in-memory log before it can go. Only a follower that needs
// entries the leader no longer has is sent a copy of the leader's
// database, which may be newer than the snapshot's index: the follower
// skips the entries it already holds, by the index recorded in the
// database.

// maybeSnapshot takes a snapshot every SnapshotCount applied requests, or
// SnapshotBytes of applied entries, whichever comes first.
func (n *Node) maybeSnapshot() {
	applied, prevSnap := n.applied.Load(), n.snapIndex
	// --snapshot-count counts transactions, as etcd's, not entries: a
	// packed entry holds several (pack.go), and the raft log kept in
	// memory until the snapshot grows with the requests, not the entries.
	// After a restart the index distance is the count to go by.
	if n.sinceSnap <= n.cfg.SnapshotCount && applied-prevSnap <= n.cfg.SnapshotCount &&
		n.bytesSinceSnap <= n.cfg.SnapshotBytes {
		return
	}
	// The database's commits are not synced one by one: make them durable
	// before the WAL entries they applied can go.
	if err := n.syncDB(); err != nil {
		n.log.Warn("sync database before a snapshot", "err", err)
		return
	}
	snapshot, err := n.storage.CreateSnapshot(applied, n.confState, n.cluster.stateJSON())
	if err != nil {
		if !errors.Is(err, raft.ErrSnapOutOfDate) {
			n.log.Warn("create snapshot", "index", applied, "err", err)
		}
		return
	}
	if err := n.saveSnapshot(snapshot); err != nil {
		n.log.Warn("save snapshot", "index", applied, "err", err)
		return
	}
	// Keep some entries, so a follower a little behind gets entries rather
	// than a whole database: about --snapshot-catchup-entries requests,
	// fewer entries when they were packed.
	keep := n.cfg.CatchUpEntries
	if entries := applied - prevSnap; n.sinceSnap > entries && entries > 0 {
		keep = max(1, keep*entries/n.sinceSnap)
	}
	keep = n.keepWithin(applied, keep)
	if applied > keep {
		if err := n.storage.Compact(applied - keep); err != nil && !errors.Is(err, raft.ErrCompacted) {
			n.log.Warn("compact raft log", "index", applied-keep, "err", err)
		}
	}
	n.sinceSnap, n.bytesSinceSnap = 0, 0
	n.log.Info("snapshot taken", "index", applied)
}

// keepWithin lowers keep, the entries up to applied to be kept after a
// snapshot, to those whose data fits in CatchUpBytes (at least one).
func (n *Node) keepWithin(applied, keep uint64) uint64 {
	first, err := n.storage.FirstIndex()
	if err != nil || applied < first || keep == 0 {
		return keep
	}
	lo := first
	if applied >= keep {
		lo = max(first, applied-keep+1)
	}
	ents, err := n.storage.Entries(lo, applied+1, math.MaxUint64)
	if err != nil {
		return keep
	}
	var size uint64
	for i := len(ents) - 1; i >= 0; i-- {
		if size += uint64(len(ents[i].Data)); size > n.cfg.CatchUpBytes {
			return max(1, uint64(len(ents)-1-i))
		}
	}
	return keep
}

// saveSnapshot records a snapshot in the snapshot dir, then in the WAL,
// and releases the WAL files before it.
func (n *Node) saveSnapshot(s *raftpb.Snapshot) error {
	md := s.GetMetadata()
	if err := n.snapshotter.SaveSnap(s); err != nil {
		return fmt.Errorf("save snapshot: %w", err)
	}
	walSnap := &walpb.Snapshot{Index: proto.Uint64(md.GetIndex()), Term: proto.Uint64(md.GetTerm()), ConfState: md.GetConfState()}
	if err := n.wal.SaveSnapshot(walSnap); err != nil {
		return fmt.Errorf("record snapshot in WAL: %w", err)
	}
	if err := n.wal.ReleaseLockTo(md.GetIndex()); err != nil {
		return fmt.Errorf("release WAL: %w", err)
	}
	n.snapIndex = md.GetIndex()
	if err := n.snapshotter.ReleaseSnapDBs(s); err != nil {
		n.log.Warn("remove old received databases", "err", err)
	}
	return nil
}

// installSnapshot replaces the database with the one the leader sent with
// snapshot s (the transport stored it in the snapshot dir) and makes the
// Store follow it.
func (n *Node) installSnapshot(s *raftpb.Snapshot) error {
	md := s.GetMetadata()
	path, err := n.snapshotter.DBFilePath(md.GetIndex())
	if err != nil {
		return fmt.Errorf("database of snapshot %d: %w", md.GetIndex(), err)
	}
	n.log.Info("restoring the database from the leader's snapshot", "index", md.GetIndex())
	if err := n.db.replace(n.ctx, path); err != nil {
		return err
	}
	applied, err := n.appliedIndex(n.ctx)
	if err != nil {
		return fmt.Errorf("read applied index of the received database: %w", err)
	}
	// The database records the index of the last write it applied; the
	// entries after it up to the snapshot's index changed membership only,
	// which the snapshot's data carries.
	applied = max(applied, md.GetIndex())
	// Through setApplied, which wakes the reads waiting for an index.
	n.setApplied(applied)
	n.confState = md.GetConfState()
	if err := n.cluster.load(s.GetData()); err != nil {
		return err
	}
	n.noteApplied(md.GetIndex(), md.GetTerm())
	for _, m := range n.cluster.list() {
		if m.ID != n.id {
			n.transport.AddPeer(types.ID(m.ID), m.PeerURLs)
		}
	}
	if err := n.applier.Restore(n.ctx); err != nil {
		return fmt.Errorf("reload the store from the received database: %w", err)
	}
	return nil
}

// sendSnapshot sends m with a copy of this node's database, copied in the
// background so the Ready loop goes on.
func (n *Node) sendSnapshot(m *raftpb.Message) {
	// As etcd merges its snapshot message: the database sent is newer
	// than raft's last snapshot, so the message says what it holds, the
	// applied index with the configuration and members as of it. A member
	// added after raft's snapshot is then in the configuration it receives
	// (raft ignores a snapshot whose configuration lacks the receiver).
	if st := n.lastApplied.Load(); st != nil && st.index >= m.GetSnapshot().GetMetadata().GetIndex() {
		m = proto.Clone(m).(*raftpb.Message)
		m.Snapshot.Metadata = &raftpb.SnapshotMetadata{Index: proto.Uint64(st.index), Term: proto.Uint64(st.term), ConfState: st.confState}
		m.Snapshot.Data = st.members
	}
	n.wg.Go(func() {
		rc, size, err := n.Snapshot(n.ctx)
		if err != nil {
			n.log.Warn("copy database for a snapshot", "to", fmt.Sprintf("%x", m.GetTo()), "err", err)
			n.node.ReportSnapshot(m.GetTo(), raft.SnapshotFailure)
			return
		}
		msg := snap.NewMessage(m, rc, size)
		n.log.Info("sending database snapshot", "to", fmt.Sprintf("%x", m.GetTo()), "bytes", size,
			"index", m.GetSnapshot().GetMetadata().GetIndex())
		n.transport.SendSnapshot(msg)
		select {
		case ok := <-msg.CloseNotify():
			if ok {
				n.node.ReportSnapshot(m.GetTo(), raft.SnapshotFinish)
			} else {
				n.node.ReportSnapshot(m.GetTo(), raft.SnapshotFailure)
			}
		case <-n.ctx.Done():
		}
	})
}

// purgeOldFiles keeps at most MaxSnapshots snapshot files and MaxWALs WAL
// files (etcd's --max-snapshots, --max-wals), checked every 30 s.
func (n *Node) purgeOldFiles(snapDir, walDir string) {
	stop := n.ctx.Done()
	serrc := fileutil.PurgeFile(n.zlog, snapDir, "snap", uint(n.cfg.MaxSnapshots), 30*time.Second, stop)
	werrc := fileutil.PurgeFile(n.zlog, walDir, "wal", uint(n.cfg.MaxWALs), 30*time.Second, stop)
	select {
	case err := <-serrc:
		n.log.Warn("purge snapshot files", "err", err)
	case err := <-werrc:
		n.log.Warn("purge WAL files", "err", err)
	case <-stop:
	}
}

// appliedState is what a snapshot sent to a follower describes: the last
// applied entry, and the configuration and members after it.
type appliedState struct {
	index, term uint64
	confState   *raftpb.ConfState
	members     []byte
}

// noteApplied records the applied state after an apply batch (on the
// apply loop, or the Ready loop while the apply loop is idle).
func (n *Node) noteApplied(index, term uint64) {
	n.lastApplied.Store(&appliedState{index: index, term: term,
		confState: proto.Clone(n.confState).(*raftpb.ConfState), members: n.cluster.stateJSON()})
}
