package raftsql

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/types"
	"go.etcd.io/etcd/server/v3/etcdserver/api/rafthttp"
	"go.etcd.io/etcd/server/v3/etcdserver/api/snap"
	stats "go.etcd.io/etcd/server/v3/etcdserver/api/v2stats"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.etcd.io/etcd/server/v3/storage/wal/walpb"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/kite-db/kite/pkg/drivers/sqlite"
	"github.com/kite-db/kite/pkg/membership"
	"github.com/kite-db/kite/pkg/mvcc"
	"github.com/kite-db/kite/pkg/mvcc/memtail"
)

// Node is one member of a raftsql cluster: the Store's mvcc.Backend (the
// local database) and its mvcc.Replicator (the raft log). It composes the
// member's parts, each its own type: the raft loop's state (raftLoop,
// raftloop.go; the loops themselves in ready.go), the members as applied
// (memberSet, membership.go), the peer URLs' server and client (peerAPI,
// peer.go) and the corruption check (corruptChecker, corrupt.go). What
// stays here is what they all share: the configuration, the member's
// identity, the database, the proposals' waits and the member's lifetime.
type Node struct {
	cfg  Config
	log  *slog.Logger
	zlog *zap.Logger

	id, clusterID uint64

	raftLoop
	cluster *memberSet
	peers   peerAPI
	// corrupt is built by Start, which has the Store it checks.
	corrupt *corruptChecker

	db      *localDB
	applier mvcc.Applier

	ids   *idGenerator
	waits *waitList
	reads *readBarrier

	ctx    context.Context
	cancel context.CancelFunc
	// errc carries the error that stopped the node (a failed apply, a
	// removed member); Err exposes it. stopping says it was sent: what
	// fails after it (an apply cancelled by the stop) is a consequence,
	// not the cause.
	errc     chan error
	stopping atomic.Bool
	wg       sync.WaitGroup
	closeMu  sync.Mutex
	closed   bool
}

var (
	_ mvcc.Backend    = (*Node)(nil)
	_ mvcc.Replicator = (*Node)(nil)
)

// walMetadata is what the WAL records about the member that wrote it, so a
// data dir is never started as another member or in another cluster.
type walMetadata struct {
	Name      string   `json:"name"`
	MemberID  uint64   `json:"memberID"`
	ClusterID uint64   `json:"clusterID"`
	Token     string   `json:"token"`
	Members   []member `json:"members"`
	// Joined: the member joined a running cluster, whose members Members
	// lists as they were then.
	Joined bool `json:"joined,omitempty"`
}

// Open checks the bootstrap, opens or creates the WAL and the database, and
// binds the peer URLs. Raft starts with Start. A refused bootstrap writes
// nothing.
func Open(ctx context.Context, cfg Config) (_ *Node, err error) {
	cfg.setDefaults()
	n := &Node{cfg: cfg, log: cfg.Logger.With("component", "raftsql"), errc: make(chan error, 1),
		raftLoop: raftLoop{appliedc: make(chan struct{}), primary: make(chan bool, 16), applyc: make(chan applyJob, 64)},
		cluster:  newMemberSet(cfg)}
	if cfg.PackProposals {
		n.packq = make(chan *proposal, packQueue)
	}
	n.zlog = newZapLogger(n.log)
	n.ctx, n.cancel = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			n.closeResources()
		}
	}()
	memberDir := filepath.Join(cfg.DataDir, "member")
	walDir, snapDir := filepath.Join(memberDir, "wal"), filepath.Join(memberDir, "snap")
	dbPath := filepath.Join(cfg.DataDir, "kite.db")
	n.storage = raft.NewMemoryStorage()

	// Peer TLS first: joining a cluster asks its members over it.
	if err := n.setupPeerTLS(); err != nil {
		return nil, err
	}
	if n.peers.client, err = n.newPeerClient(); err != nil {
		return nil, err
	}
	var meta walMetadata
	if wal.Exist(walDir) {
		n.restart = true
		n.snapshotter = snap.New(n.zlog, snapDir)
		if meta, err = n.openWAL(walDir, cfg); err != nil {
			return nil, err
		}
	} else {
		if err := cfg.validate(); err != nil {
			return nil, err
		}
		if _, err := os.Stat(dbPath); err == nil {
			return nil, fmt.Errorf("data dir %s holds a kite database but no raft log: it belongs to a single-node kite or another cluster; start raftsql in an empty data dir (kite copy moves the data)", cfg.DataDir)
		}
		if cfg.ClusterState == "existing" {
			if meta, err = n.joinCluster(ctx); err != nil {
				return nil, err
			}
		} else {
			meta = walMetadata{Name: cfg.Name, Token: cfg.Token, Members: cfg.initialMembers()}
			meta.MemberID = membership.MemberID(cfg.InitialCluster[cfg.Name], cfg.Token)
			ids := make([]uint64, len(meta.Members))
			for i, m := range meta.Members {
				ids[i] = m.ID
			}
			meta.ClusterID = membership.ClusterID(ids...)
		}
		if err := os.MkdirAll(snapDir, 0o700); err != nil {
			return nil, fmt.Errorf("create snapshot dir: %w", err)
		}
		n.snapshotter = snap.New(n.zlog, snapDir)
		b, _ := json.Marshal(meta)
		if n.wal, err = wal.Create(n.zlog, walDir, b); err != nil {
			return nil, fmt.Errorf("create WAL: %w", err)
		}
		n.confState = &raftpb.ConfState{}
	}
	n.id, n.clusterID, n.joined = meta.MemberID, meta.ClusterID, meta.Joined
	n.cluster.id, n.cluster.bootstrap = meta.MemberID, meta.Members
	n.ids = newIDGenerator(n.id, time.Now())
	n.waits = newWaitList()
	n.reads = newReadBarrier(n)

	var behind *memtail.Options
	if cfg.ApplyBehind {
		behind = &memtail.Options{RowCacheBytes: cfg.RowCacheBytes}
	}
	if n.db, err = openLocalDB(ctx, dbPath, localDBOptions(cfg), behind, n.log, func(err error) {
		n.fail(fmt.Errorf("apply committed entries to the database: %w", err))
	}); err != nil {
		return nil, err
	}
	applied, err := n.appliedIndex(ctx)
	if err != nil {
		return nil, fmt.Errorf("read applied index: %w", err)
	}
	n.applied.Store(applied)

	electionTicks := int(cfg.Election / cfg.Heartbeat)
	n.raftCfg = &raft.Config{
		ID:            n.id,
		ElectionTick:  electionTicks,
		HeartbeatTick: 1,
		Storage:       n.storage,
		// Raft replays everything after the snapshot: configuration
		// changes must reach it again; writes the database holds are
		// skipped by apply.
		Applied:         n.snapIndex,
		MaxSizePerMsg:   uint64(cfg.MaxRequestBytes),
		MaxInflightMsgs: 4096 / 8,
		CheckQuorum:     true,
		PreVote:         true,
		Logger:          raftLogger{n.log},
		// Leader election needs no Tick for a lease: ReadIndex is
		// confirmed by a heartbeat round (ReadOnlySafe).
	}

	for _, u := range cfg.ListenPeer {
		l, err := n.listenPeer(u)
		if err != nil {
			return nil, err
		}
		n.peers.lns = append(n.peers.lns, l)
	}
	return n, nil
}

// openWAL reads the raft state of a member that ran before: the newest
// snapshot, then the WAL after it.
func (n *Node) openWAL(walDir string, cfg Config) (walMetadata, error) {
	var meta walMetadata
	walSnaps, err := wal.ValidSnapshotEntries(n.zlog, walDir)
	if err != nil {
		return meta, fmt.Errorf("read WAL snapshot entries: %w", err)
	}
	snapshot, err := n.snapshotter.LoadNewestAvailable(walSnaps)
	if err != nil && !errors.Is(err, snap.ErrNoSnapshot) {
		return meta, fmt.Errorf("load snapshot: %w", err)
	}
	walSnap := &walpb.Snapshot{}
	if snapshot != nil {
		walSnap.Index = proto.Uint64(snapshot.GetMetadata().GetIndex())
		walSnap.Term = proto.Uint64(snapshot.GetMetadata().GetTerm())
	}
	w, metadata, hs, ents, err := readWAL(n.zlog, n.log, walDir, walSnap)
	if err != nil {
		return meta, err
	}
	n.wal = w
	if err := json.Unmarshal(metadata, &meta); err != nil {
		return meta, fmt.Errorf("read WAL metadata: %w", err)
	}
	if cfg.Name != "" && cfg.Name != meta.Name {
		return meta, fmt.Errorf("data dir %s belongs to member %q, not %q (--name)", cfg.DataDir, meta.Name, cfg.Name)
	}
	// The token, not the member ID from --initial-cluster: a member whose
	// peer URLs 'member update' changed restarts with its new URLs.
	if cfg.Token != meta.Token {
		return meta, fmt.Errorf("data dir %s belongs to member %x of cluster %x (cluster token %q), not to a cluster with --initial-cluster-token %q: it is another cluster's data",
			cfg.DataDir, meta.MemberID, meta.ClusterID, meta.Token, cfg.Token)
	}
	n.confState = &raftpb.ConfState{}
	if snapshot != nil {
		if err := n.storage.ApplySnapshot(snapshot); err != nil {
			return meta, fmt.Errorf("apply snapshot to the raft log: %w", err)
		}
		n.confState = snapshot.GetMetadata().GetConfState()
		n.snapIndex = snapshot.GetMetadata().GetIndex()
		if err := n.cluster.load(snapshot.GetData()); err != nil {
			return meta, err
		}
		if n.IsIDRemoved(meta.MemberID) {
			return meta, fmt.Errorf("member %x: %w; its data dir %s cannot serve again (add a new member with 'member add' and an empty data dir)",
				meta.MemberID, errRemoved, cfg.DataDir)
		}
	}
	if hs != nil {
		if err := n.storage.SetHardState(hs); err != nil {
			return meta, fmt.Errorf("set hard state: %w", err)
		}
	}
	if err := n.storage.Append(ents); err != nil {
		return meta, fmt.Errorf("append WAL entries: %w", err)
	}
	n.log.Info("restarting member from its WAL", "member", fmt.Sprintf("%x", meta.MemberID),
		"snapshot_index", n.snapIndex, "entries", len(ents))
	return meta, nil
}

// ID returns this member's ID; ClusterID the cluster's.
func (n *Node) ID() uint64        { return n.id }
func (n *Node) ClusterID() uint64 { return n.clusterID }

// Start implements mvcc.Replicator: raft starts, the peers are served, and
// committed entries flow to a.
func (n *Node) Start(a mvcc.Applier) error {
	n.applier = a
	urls, err := peerURLs(n.cluster.self().PeerURLs)
	if err != nil {
		return err
	}
	if n.restart || n.joined {
		// A joining member's log starts empty: the leader sends it the
		// entries, or a snapshot, that define the cluster.
		n.node = raft.RestartNode(n.raftCfg)
	} else {
		// A new cluster's first entries add its members, names included.
		bootstrap := n.cluster.bootstrapped()
		peers := make([]raft.Peer, len(bootstrap))
		for i, m := range bootstrap {
			ctx, _ := json.Marshal(confChangeContext{member: m})
			peers[i] = raft.Peer{ID: m.ID, Context: ctx}
		}
		n.node = raft.StartNode(n.raftCfg, peers)
	}
	n.transport = &rafthttp.Transport{
		Logger:      n.zlog,
		ID:          types.ID(n.id),
		URLs:        urls,
		ClusterID:   types.ID(n.clusterID),
		Raft:        n,
		Snapshotter: n.snapshotter,
		TLSInfo:     n.cfg.PeerTLS.Info,
		ServerStats: stats.NewServerStats(n.cfg.Name, types.ID(n.id).String()),
		LeaderStats: stats.NewLeaderStats(n.zlog, types.ID(n.id).String()),
		ErrorC:      make(chan error, 1),
	}
	if err := n.transport.Start(); err != nil {
		return fmt.Errorf("start peer transport: %w", err)
	}
	// The peers known now; the log's configuration changes add and remove
	// them from here on (membership.go).
	for _, m := range n.cluster.list() {
		if m.ID != n.id {
			n.transport.AddPeer(types.ID(m.ID), m.PeerURLs)
		}
	}
	n.corrupt = &corruptChecker{self: n.id, first: 5 * n.cfg.Election, interval: n.cfg.CorruptCheckInterval,
		timeout: n.requestTimeout(), log: n.log, store: a, cluster: n.cluster, peers: &n.peers, leader: n.lead.Load}
	n.peers.serve(&n.wg, n.peerHandler(), n.fail)
	memberDir := filepath.Join(n.cfg.DataDir, "member")
	n.wg.Go(func() { n.purgeOldFiles(filepath.Join(memberDir, "snap"), filepath.Join(memberDir, "wal")) })
	n.wg.Go(n.run)
	n.wg.Go(n.applyLoop)
	if n.packq != nil {
		n.wg.Go(n.packLoop)
	}
	n.wg.Go(n.reads.loop)
	n.wg.Go(func() { n.corrupt.run(n.ctx) })
	n.wg.Go(n.publish)
	return nil
}

// peerURLs parses this member's peer URLs for raft's transport, which
// must be given them all: a member it cannot name to its peers would
// start deaf.
func peerURLs(us []string) (types.URLs, error) {
	urls, err := types.NewURLs(us)
	if err != nil {
		return nil, fmt.Errorf("raftsql: peer URLs %q: %w", us, err)
	}
	return urls, nil
}

// Err returns a channel that receives the error that stopped the node: a
// failed apply or WAL write, after which the node must not serve.
func (n *Node) Err() <-chan error { return n.errc }

func (n *Node) fail(err error) {
	if n.stopping.CompareAndSwap(false, true) {
		n.errc <- err
		n.log.Error("raftsql node stopped", "err", err)
	} else {
		n.log.Debug("raftsql node: an error after the stop", "err", err)
	}
	n.cancel()
}

// Close stops raft, the peers and the database.
func (n *Node) Close() error {
	n.closeMu.Lock()
	if n.closed {
		n.closeMu.Unlock()
		return nil
	}
	n.closed = true
	n.closeMu.Unlock()
	n.cancel()
	n.peers.shutdown()
	n.wg.Wait()
	if n.node != nil {
		n.node.Stop()
	}
	if n.transport != nil {
		n.transport.Stop()
	}
	return n.closeResources()
}

func (n *Node) closeResources() error {
	var errs []error
	n.peers.closeListeners()
	if n.wal != nil {
		errs = append(errs, n.wal.Close())
	}
	if n.db != nil {
		errs = append(errs, n.db.close())
	}
	return errors.Join(errs...)
}

// RaftStatus returns the member's view of raft: the leader (0: none),
// the term, the last committed and the last applied index.
func (n *Node) RaftStatus() (leader, term, index, applied uint64) {
	return n.lead.Load(), n.term.Load(), n.committed.Load(), n.applied.Load()
}

// MoveLeader transfers leadership to member target, as etcd's MoveLeader:
// only the leader may, to a member of the cluster, and the call returns
// once target leads.
func (n *Node) MoveLeader(ctx context.Context, target uint64) error {
	if n.lead.Load() != n.id {
		return membership.ErrNotLeader
	}
	if _, ok := n.cluster.byID(target); !ok {
		return membership.ErrBadLeaderTransferee
	}
	if target == n.id {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, n.requestTimeout())
	defer cancel()
	n.log.Info("transferring leadership", "to", fmt.Sprintf("%x", target))
	n.node.TransferLeadership(ctx, n.id, target)
	for n.lead.Load() != target {
		select {
		case <-ctx.Done():
			return membership.ErrLeaderTransferTimeout
		case <-time.After(n.cfg.Heartbeat):
		}
	}
	return nil
}

// localDBOptions opens the member's database as cfg.SQLite says, without a
// sync per commit: the raft WAL holds every applied entry durably and a
// restart replays it from the applied index; the database is synced before
// a snapshot lets the WAL go (snapshot.go).
func localDBOptions(cfg Config) sqlite.Options {
	opts := cfg.SQLite
	opts.Logger, opts.NoCommitSync = cfg.Logger, true
	if cfg.ApplyBehind && opts.CheckpointInterval == 0 {
		opts.CheckpointInterval = applyBehindCheckpointInterval
	}
	return opts
}

// applyBehindCheckpointInterval spaces the local database's checkpoints
// when memtail flushes into it every 100 ms: each flush rewrote most of
// the leaves of the table live (schema version 2; version 3 has none, a
// flush appends to the log and rewrites its inner pages), and a checkpoint
// after every flush copied them into the file every time (9-10% of a
// member's CPU under put@64, docs/benchmarks.md). The WAL it lets grow stays below the writer's own
// wal_autocheckpoint bound at the rates measured there.
const applyBehindCheckpointInterval = time.Second
