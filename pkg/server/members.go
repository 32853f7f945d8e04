package server

import (
	"context"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kite-db/kite/pkg/membership"
	"github.com/kite-db/kite/pkg/mvcc"
)

// Clustered is implemented by a Backend that is one member of a replicated
// cluster (raftsql). Declared here, by its consumer, so that pkg/server
// needs no driver; contracts_test.go checks raftsql's member against it.
type Clustered interface {
	ID() uint64
	ClusterID() uint64
	Members() []*pb.Member
	// RaftStatus is raft's view: the leader's ID (0: none), the term, the
	// last committed and the last applied index.
	RaftStatus() (leader, term, index, applied uint64)
	// MoveLeader hands leadership to member target and waits until it
	// leads: membership.ErrNotLeader, ErrBadLeaderTransferee,
	// ErrLeaderTransferTimeout.
	MoveLeader(ctx context.Context, target uint64) error
	// AddMember, RemoveMember, UpdateMember and PromoteMember change the
	// membership through the replicated log and return the members after
	// the change, or pkg/membership's errors (ErrMemberExists,
	// ErrMemberNotFound, ErrMemberNotLearner, ErrLearnerNotReady, ...) and
	// the store's (mvcc.ErrTimeout, mvcc.ErrStopped, ...).
	AddMember(ctx context.Context, peerURLs []string, learner bool) (*pb.Member, []*pb.Member, error)
	RemoveMember(ctx context.Context, id uint64) ([]*pb.Member, error)
	UpdateMember(ctx context.Context, id uint64, peerURLs []string) ([]*pb.Member, error)
	PromoteMember(ctx context.Context, id uint64) ([]*pb.Member, error)
	// IsLearner reports whether this member is a learner, which serves
	// only Status and serializable reads, as etcd's learners.
	IsLearner() bool
	// Metrics are what etcd's raft loop counts.
	Metrics() (leaderChanges uint64, proposalsPending int64, proposalsFailed uint64)
	// Err reports the error that stopped the member (a failed apply).
	Err() <-chan error
}

// cluster is everything the server knows of the cluster it serves: its
// members, raft's view, the membership changes, learners, what stops the
// member and the metrics its replication keeps. It is chosen once, when
// the storage opens (newCluster), as the store chooses its sequencer; no
// other code asks which mode it serves.
type cluster interface {
	// id is this member's ID, in every header and in the alarms it raises.
	id() uint64
	clusterID() uint64
	members() []*pb.Member
	// term is raft's current term, asked for every response header.
	term() uint64
	status() raftStatus
	moveLeader(ctx context.Context, target uint64) error
	// addMember and the others answer the Cluster service's changes; the
	// URLs are checked already.
	addMember(ctx context.Context, peerURLs []string, learner bool) (*pb.Member, []*pb.Member, error)
	removeMember(ctx context.Context, id uint64) ([]*pb.Member, error)
	updateMember(ctx context.Context, id uint64, peerURLs []string) ([]*pb.Member, error)
	promoteMember(ctx context.Context, id uint64) ([]*pb.Member, error)
	isLearner() bool
	// stopped yields the error that stopped the member; the server stops
	// with it. A channel that never yields is allowed.
	stopped() <-chan error
	// proposals are etcd's raft counters: leader changes and the pending
	// and failed proposals.
	proposals() (leaderChanges uint64, pending int64, failed uint64)
	// defaultMetrics is what the replication registers in Prometheus'
	// default registry (etcd's raft, WAL and transport packages), served
	// beside the server's own registry; nil if nothing. A member with a
	// WAL of its own reports its fsyncs there.
	defaultMetrics() prometheus.Gatherer
}

// newCluster returns the cluster of the storage just opened: the
// replicated cluster a Clustered backend belongs to, else a cluster of one
// member named by cfg's name and advertised client URLs.
func newCluster(cfg Config, backend mvcc.Backend, counts *proposalCounts, rev func() int64) cluster {
	if c, ok := backend.(Clustered); ok {
		return replicated{c}
	}
	id := membership.MemberID(cfg.AdvertiseClientURLs, cfg.Name)
	return &singleMember{
		member: &pb.Member{ID: id, Name: cfg.Name, PeerURLs: cfg.AdvertisePeerURLs, ClientURLs: cfg.AdvertiseClientURLs},
		counts: counts,
		rev:    rev,
	}
}

// replicated is a raftsql member's cluster: raft answers everything.
type replicated struct{ c Clustered }

func (r replicated) id() uint64                         { return r.c.ID() }
func (r replicated) clusterID() uint64                  { return r.c.ClusterID() }
func (r replicated) members() []*pb.Member              { return r.c.Members() }
func (r replicated) isLearner() bool                    { return r.c.IsLearner() }
func (r replicated) stopped() <-chan error              { return r.c.Err() }
func (r replicated) proposals() (uint64, int64, uint64) { return r.c.Metrics() }

func (r replicated) term() uint64 {
	_, term, _, _ := r.c.RaftStatus()
	return term
}

func (r replicated) status() raftStatus {
	var st raftStatus
	st.Leader, st.Term, st.Index, st.Applied = r.c.RaftStatus()
	return st
}

func (r replicated) moveLeader(ctx context.Context, target uint64) error {
	return r.c.MoveLeader(ctx, target)
}

func (r replicated) addMember(ctx context.Context, urls []string, learner bool) (*pb.Member, []*pb.Member, error) {
	return r.c.AddMember(ctx, urls, learner)
}

func (r replicated) removeMember(ctx context.Context, id uint64) ([]*pb.Member, error) {
	return r.c.RemoveMember(ctx, id)
}

func (r replicated) updateMember(ctx context.Context, id uint64, urls []string) ([]*pb.Member, error) {
	return r.c.UpdateMember(ctx, id, urls)
}

func (r replicated) promoteMember(ctx context.Context, id uint64) ([]*pb.Member, error) {
	return r.c.PromoteMember(ctx, id)
}

func (r replicated) defaultMetrics() prometheus.Gatherer {
	return filteredGatherer{prometheus.DefaultGatherer, raftDefaultMetrics}
}

// singleMember is the cluster of a server that is a cluster of its own
// (sqlite mode, and each server on a shared database): one voting member,
// always its own leader, in raft's first term after bootstrap; its
// revision stands in for raft's index, as every committed write is one
// entry of a log.
type singleMember struct {
	member *pb.Member
	counts *proposalCounts
	rev    func() int64
}

// singleTerm is the term a single member reports: it never holds an
// election after its first (etcd's term after bootstrap).
const singleTerm = 1

// errNeedsRaftSQL answers membership changes: a single member cannot
// change its membership, only raftsql mode has raft configuration changes
// behind the Cluster API.
var errNeedsRaftSQL = status.Error(codes.FailedPrecondition,
	"etcdserver: membership changes need kite's raftsql mode; this server is a single-member cluster")

func (m *singleMember) id() uint64            { return m.member.ID }
func (m *singleMember) clusterID() uint64     { return membership.ClusterID(m.member.ID) }
func (m *singleMember) members() []*pb.Member { return []*pb.Member{m.member} }
func (m *singleMember) term() uint64          { return singleTerm }
func (m *singleMember) isLearner() bool       { return false }
func (m *singleMember) stopped() <-chan error { return nil }

func (m *singleMember) defaultMetrics() prometheus.Gatherer { return nil }

func (m *singleMember) status() raftStatus {
	rev := uint64(m.rev())
	return raftStatus{Leader: m.member.ID, Term: singleTerm, Index: rev, Applied: rev}
}

// proposals: a single etcd member saw one leader change, its own
// election; its writes are counted as proposals by the KV service.
func (m *singleMember) proposals() (uint64, int64, uint64) {
	return 1, m.counts.pending.Load(), m.counts.failed.Load()
}

// moveLeader: the only member is always the leader, so a transfer to
// itself succeeds at once (raft ignores it in etcd) and one to anyone else
// names no member.
func (m *singleMember) moveLeader(_ context.Context, target uint64) error {
	if target != m.member.ID {
		return rpctypes.ErrGRPCBadLeaderTransferee
	}
	return nil
}

func (m *singleMember) addMember(context.Context, []string, bool) (*pb.Member, []*pb.Member, error) {
	return nil, nil, errNeedsRaftSQL
}

func (m *singleMember) removeMember(_ context.Context, id uint64) ([]*pb.Member, error) {
	return nil, m.refuseChange(id)
}

func (m *singleMember) updateMember(_ context.Context, id uint64, _ []string) ([]*pb.Member, error) {
	return nil, m.refuseChange(id)
}

// promoteMember: the member is a voter, so etcd's "can only promote a
// learner member" unless it is not the member at all.
func (m *singleMember) promoteMember(_ context.Context, id uint64) ([]*pb.Member, error) {
	if id != m.member.ID {
		return nil, rpctypes.ErrGRPCMemberNotFound
	}
	return nil, rpctypes.ErrGRPCMemberNotLearner
}

// refuseChange: etcd's "member not found" for an unknown member, else the
// reason no change can be made.
func (m *singleMember) refuseChange(id uint64) error {
	if id != m.member.ID {
		return rpctypes.ErrGRPCMemberNotFound
	}
	return errNeedsRaftSQL
}

// proposalCounts are the KV service's count of the writes it proposes to
// the store, etcd's pending and failed proposals for a member without raft
// (singleMember.proposals): a write is pending while the store commits it,
// and failed when it did not complete for a reason other than etcd's
// request errors.
type proposalCounts struct {
	pending atomic.Int64
	failed  atomic.Uint64
}

// raftStatus is what cluster.status returns.
type raftStatus struct {
	Leader, Term, Index, Applied uint64
}
