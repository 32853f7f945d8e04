package server

import (
	"context"
	"net/url"
	"slices"
	"strings"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// errNeedsRaftSQL answers membership changes: a sqlite-mode server is a
// cluster of exactly one member, and only raftsql mode has raft
// configuration changes behind the Cluster API.
var errNeedsRaftSQL = status.Error(codes.FailedPrecondition,
	"etcdserver: membership changes need kite's raftsql mode; this server is a single-member cluster")

// refuseChange answers a membership change in sqlite or postgres mode:
// etcd's "member not found" for an unknown member, else the reason.
func (s *clusterServer) refuseChange(id uint64) error {
	if !slices.ContainsFunc(s.members(), func(m *pb.Member) bool { return m.ID == id }) {
		return rpctypes.ErrGRPCMemberNotFound
	}
	return errNeedsRaftSQL
}

// Clustered is implemented by a Backend that is one member of a replicated
// cluster (raftsql). The server reports the cluster through it: member and
// cluster IDs, the members, raft's status in headers and Status, and stops
// serving when the member stops (Err).
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
	Err() <-chan error
}

// raftStatus is what RaftStatus returns.
type raftStatus struct {
	Leader, Term, Index, Applied uint64
}

// clusterServer is etcd's Cluster service: the one member of a single
// server, or the members of a raftsql cluster.
type clusterServer struct {
	pb.UnsafeClusterServer

	hdr    *header
	member *pb.Member
}

var _ pb.ClusterServer = (*clusterServer)(nil)

// header is etcd's cluster header: no revision, membership is not in the
// key space.
func (s *clusterServer) header() *pb.ResponseHeader { return s.hdr.fillWithoutRevision(nil) }

func (s *clusterServer) members() []*pb.Member {
	if s.hdr.raft != nil {
		return s.hdr.raft.Members()
	}
	return []*pb.Member{s.member}
}

func (s *clusterServer) MemberList(ctx context.Context, r *pb.MemberListRequest) (*pb.MemberListResponse, error) {
	return &pb.MemberListResponse{Header: s.header(), Members: s.members()}, nil
}

// MemberAdd checks the URLs as etcd does, then adds the member in
// raftsql mode; other modes are a single member and refuse.
func (s *clusterServer) MemberAdd(ctx context.Context, r *pb.MemberAddRequest) (*pb.MemberAddResponse, error) {
	urls, err := peerURLs(r.PeerURLs)
	if err != nil {
		return nil, err
	}
	if s.hdr.raft == nil {
		return nil, errNeedsRaftSQL
	}
	m, ms, err := s.hdr.raft.AddMember(ctx, urls, r.IsLearner)
	if err != nil {
		return nil, toGRPCError(err)
	}
	return &pb.MemberAddResponse{Header: s.header(), Member: m, Members: ms}, nil
}

func (s *clusterServer) MemberRemove(ctx context.Context, r *pb.MemberRemoveRequest) (*pb.MemberRemoveResponse, error) {
	if s.hdr.raft == nil {
		return nil, s.refuseChange(r.ID)
	}
	ms, err := s.hdr.raft.RemoveMember(ctx, r.ID)
	if err != nil {
		return nil, toGRPCError(err)
	}
	return &pb.MemberRemoveResponse{Header: s.header(), Members: ms}, nil
}

func (s *clusterServer) MemberUpdate(ctx context.Context, r *pb.MemberUpdateRequest) (*pb.MemberUpdateResponse, error) {
	urls, err := peerURLs(r.PeerURLs)
	if err != nil {
		return nil, err
	}
	if s.hdr.raft == nil {
		return nil, s.refuseChange(r.ID)
	}
	ms, err := s.hdr.raft.UpdateMember(ctx, r.ID, urls)
	if err != nil {
		return nil, toGRPCError(err)
	}
	return &pb.MemberUpdateResponse{Header: s.header(), Members: ms}, nil
}

// MemberPromote: a single member is a voter, so etcd's "can only promote
// a learner member" unless it is not the member at all.
func (s *clusterServer) MemberPromote(ctx context.Context, r *pb.MemberPromoteRequest) (*pb.MemberPromoteResponse, error) {
	if s.hdr.raft == nil {
		if !slices.ContainsFunc(s.members(), func(m *pb.Member) bool { return m.ID == r.ID }) {
			return nil, rpctypes.ErrGRPCMemberNotFound
		}
		return nil, rpctypes.ErrGRPCMemberNotLearner
	}
	ms, err := s.hdr.raft.PromoteMember(ctx, r.ID)
	if err != nil {
		return nil, toGRPCError(err)
	}
	return &pb.MemberPromoteResponse{Header: s.header(), Members: ms}, nil
}

// peerURLs checks URLs as etcd's types.NewURLs does and returns them
// trimmed and sorted, as etcd stores them.
func peerURLs(raw []string) ([]string, error) {
	if len(raw) == 0 {
		return nil, rpctypes.ErrGRPCMemberBadURLs
	}
	urls := make([]string, len(raw))
	for i, u := range raw {
		if !validPeerURL(u) {
			return nil, rpctypes.ErrGRPCMemberBadURLs
		}
		urls[i] = strings.TrimSpace(u)
	}
	slices.Sort(urls)
	return urls, nil
}

// learnerUnary and learnerStream refuse what etcd's learners refuse:
// everything but Status and serializable Range, and every stream but
// Snapshot.
func learnerUnary(hdr *header) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if hdr.raft != nil && hdr.raft.IsLearner() {
			switch r := req.(type) {
			case *pb.StatusRequest:
			case *pb.RangeRequest:
				if !r.Serializable {
					return nil, rpctypes.ErrGRPCNotSupportedForLearner
				}
			default:
				return nil, rpctypes.ErrGRPCNotSupportedForLearner
			}
		}
		return handler(ctx, req)
	}
}

func learnerStream(hdr *header) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if hdr.raft != nil && hdr.raft.IsLearner() && info.FullMethod != pb.Maintenance_Snapshot_FullMethodName {
			return rpctypes.ErrGRPCNotSupportedForLearner
		}
		return handler(srv, ss)
	}
}

// validPeerURL applies etcd's types.NewURLs rules: http or https, a
// host:port, no path.
func validPeerURL(raw string) bool {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	if !strings.Contains(u.Host, ":") || (u.Path != "" && u.Path != "/") {
		return false
	}
	return true
}
