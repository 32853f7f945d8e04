package raftsql

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"go.etcd.io/etcd/server/v3/etcdserver/api/snap"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.etcd.io/etcd/server/v3/storage/wal/walpb"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/kite-db/kite/pkg/drivers/sqlite"
	"github.com/kite-db/kite/pkg/membership"
)

// Restore makes cfg.DataDir the data dir of a member of a NEW cluster
// whose key space is the database file db, as etcdutl snapshot restore
// does: every member of the new cluster is restored from the same file
// with the same --initial-cluster and token, then started. The raft log
// begins with a snapshot that names the members (so the first start needs
// no bootstrap entries), and the database records that snapshot's index
// as applied. It returns the database's revision.
func Restore(ctx context.Context, cfg Config, db []byte) (int64, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return 0, err
	}
	memberDir := filepath.Join(cfg.DataDir, "member")
	dbPath := filepath.Join(cfg.DataDir, "kite.db")
	if wal.Exist(filepath.Join(memberDir, "wal")) {
		return 0, fmt.Errorf("%s already holds a member's raft log; restore into a new data directory", cfg.DataDir)
	}
	if _, err := os.Stat(dbPath); err == nil {
		return 0, fmt.Errorf("%s already exists; restore into a new data directory", dbPath)
	}
	members := cfg.initialMembers()
	ids := make([]uint64, len(members))
	for i, m := range members {
		ids[i] = m.ID
	}
	meta := walMetadata{Name: cfg.Name, Token: cfg.Token, Members: members,
		MemberID: membership.MemberID(cfg.InitialCluster[cfg.Name], cfg.Token), ClusterID: membership.ClusterID(ids...)}
	// The snapshot stands for the entries that would have added the
	// members: one per member, in term 1.
	index := uint64(len(members))

	if err := os.MkdirAll(filepath.Join(memberDir, "snap"), 0o700); err != nil {
		return 0, fmt.Errorf("create data dir: %w", err)
	}
	if err := writeDB(dbPath, db); err != nil {
		return 0, err
	}
	rev, err := markApplied(ctx, dbPath, index)
	if err != nil {
		os.Remove(dbPath)
		return 0, err
	}
	zlog := zap.NewNop()
	data, _ := json.Marshal(clusterState{Members: members})
	cs := &raftpb.ConfState{Voters: ids}
	s := &raftpb.Snapshot{Data: data, Metadata: &raftpb.SnapshotMetadata{
		Index: proto.Uint64(index), Term: proto.Uint64(1), ConfState: cs}}
	if err := snap.New(zlog, filepath.Join(memberDir, "snap")).SaveSnap(s); err != nil {
		return 0, fmt.Errorf("save snapshot: %w", err)
	}
	b, _ := json.Marshal(meta)
	w, err := wal.Create(zlog, filepath.Join(memberDir, "wal"), b)
	if err != nil {
		return 0, fmt.Errorf("create WAL: %w", err)
	}
	defer w.Close()
	if err := w.SaveSnapshot(&walpb.Snapshot{Index: proto.Uint64(index), Term: proto.Uint64(1), ConfState: cs}); err != nil {
		return 0, fmt.Errorf("record snapshot in WAL: %w", err)
	}
	if err := w.Save(&raftpb.HardState{Term: proto.Uint64(1), Commit: proto.Uint64(index)}, nil); err != nil {
		return 0, fmt.Errorf("write WAL: %w", err)
	}
	return rev, nil
}

func writeDB(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return syncDir(filepath.Dir(path))
}

// markApplied records index as the database's applied raft index (a
// snapshot of a raftsql member carries its old cluster's) and returns the
// database's revision; it also proves the file is a kite database.
func markApplied(ctx context.Context, path string, index uint64) (int64, error) {
	b, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		return 0, fmt.Errorf("snapshot is not a kite database: %w", err)
	}
	defer b.Close()
	tx, err := b.BeginAppliedWrite(ctx)
	if err != nil {
		return 0, err
	}
	rev, _, err := tx.Revisions(ctx)
	if err == nil {
		err = tx.SetAppliedIndex(ctx, index)
	}
	if err != nil {
		tx.Rollback()
		return 0, fmt.Errorf("record applied index: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("record applied index: %w", err)
	}
	return rev, nil
}
