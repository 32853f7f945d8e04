package server

import (
	"context"
	"net/url"
	"slices"
	"strings"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
)

// clusterServer is etcd's Cluster service over the member's cluster
// (members.go): the one member of a single server, or the members of a
// raftsql cluster.
type clusterServer struct {
	pb.UnsafeClusterServer

	hdr *header
}

var _ pb.ClusterServer = (*clusterServer)(nil)

// header is etcd's cluster header: no revision, membership is not in the
// key space.
func (s *clusterServer) header() *pb.ResponseHeader { return s.hdr.fillWithoutRevision(nil) }

func (s *clusterServer) MemberList(ctx context.Context, r *pb.MemberListRequest) (*pb.MemberListResponse, error) {
	return &pb.MemberListResponse{Header: s.header(), Members: s.hdr.cluster.members()}, nil
}

// MemberAdd checks the URLs as etcd does, then adds the member (a single
// member refuses).
func (s *clusterServer) MemberAdd(ctx context.Context, r *pb.MemberAddRequest) (*pb.MemberAddResponse, error) {
	urls, err := peerURLs(r.PeerURLs)
	if err != nil {
		return nil, err
	}
	m, ms, err := s.hdr.cluster.addMember(ctx, urls, r.IsLearner)
	if err != nil {
		return nil, toGRPCError(err)
	}
	return &pb.MemberAddResponse{Header: s.header(), Member: m, Members: ms}, nil
}

func (s *clusterServer) MemberRemove(ctx context.Context, r *pb.MemberRemoveRequest) (*pb.MemberRemoveResponse, error) {
	ms, err := s.hdr.cluster.removeMember(ctx, r.ID)
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
	ms, err := s.hdr.cluster.updateMember(ctx, r.ID, urls)
	if err != nil {
		return nil, toGRPCError(err)
	}
	return &pb.MemberUpdateResponse{Header: s.header(), Members: ms}, nil
}

func (s *clusterServer) MemberPromote(ctx context.Context, r *pb.MemberPromoteRequest) (*pb.MemberPromoteResponse, error) {
	ms, err := s.hdr.cluster.promoteMember(ctx, r.ID)
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
		if hdr.cluster.isLearner() {
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
		if hdr.cluster.isLearner() && info.FullMethod != pb.Maintenance_Snapshot_FullMethodName {
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
