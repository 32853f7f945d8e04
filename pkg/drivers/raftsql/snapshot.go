package raftsql

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/fileutil"
	"go.etcd.io/etcd/server/v3/etcdserver/api/snap"
	"go.etcd.io/etcd/server/v3/storage/wal/walpb"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Snapshots. The database itself is the state machine's snapshot: every
// transaction records the index it applied, and SQLite makes each commit
// durable. So a raft snapshot needs no copy of the data: it records the
// index and configuration, after which the WAL and the in-memory log
// before it can go. Only a follower that needs entries the leader no
// longer has is sent a copy of the leader's database, which may be newer
// than the snapshot's index: the follower skips the entries it already
// holds, by the index recorded in the database.

// maybeSnapshot takes a snapshot every SnapshotCount applied entries.
func (n *Node) maybeSnapshot() {
	applied := n.applied.Load()
	if applied-n.snapIndex <= n.cfg.SnapshotCount {
		return
	}
	// The database's commits are not synced one by one: make them durable
	// before the WAL entries they applied can go.
	if err := n.syncDB(); err != nil {
		n.log.Warn("sync database before a snapshot", "err", err)
		return
	}
	data, _ := json.Marshal(n.members)
	snapshot, err := n.storage.CreateSnapshot(applied, n.confState, data)
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
	// than a whole database.
	if keep := n.cfg.CatchUpEntries; applied > keep {
		if err := n.storage.Compact(applied - keep); err != nil && !errors.Is(err, raft.ErrCompacted) {
			n.log.Warn("compact raft log", "index", applied-keep, "err", err)
		}
	}
	n.log.Info("snapshot taken", "index", applied)
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
	if applied < md.GetIndex() {
		return fmt.Errorf("received database applied index %d is older than its snapshot %d", applied, md.GetIndex())
	}
	// Through setApplied, which wakes the reads waiting for an index.
	n.setApplied(applied)
	n.confState = md.GetConfState()
	if err := n.applier.Restore(n.ctx); err != nil {
		return fmt.Errorf("reload the store from the received database: %w", err)
	}
	return nil
}

// sendSnapshot sends m with a copy of this node's database, copied in the
// background so the Ready loop goes on.
func (n *Node) sendSnapshot(m *raftpb.Message) {
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
