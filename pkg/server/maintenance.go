package server

import (
	"context"
	"log/slog"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/api/v3/version"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kite-db/kite/pkg/mvcc"
)

// storageVersion is what Status and Snapshot report as the storage schema
// version: that of the etcd release whose API kite serves ("3.7.0").
func storageVersion() string { return version.Cluster(version.Version) + ".0" }

// errUnknownMethod is etcd's answer to a Downgrade action it does not know.
var errUnknownMethod = status.Error(codes.Unknown, "etcdserver: unknown method")

// maintenanceServer is etcd's Maintenance service for a single member that
// is always its own leader.
type maintenanceServer struct {
	pb.UnsafeMaintenanceServer

	store   *mvcc.Store
	hdr     *header
	log     *slog.Logger
	quota   int64
	dataDir string
}

var _ pb.MaintenanceServer = (*maintenanceServer)(nil)

func (s *maintenanceServer) Status(ctx context.Context, r *pb.StatusRequest) (*pb.StatusResponse, error) {
	size, inUse, err := s.store.Backend().Size(ctx)
	if err != nil {
		return nil, toGRPCError(err)
	}
	alarms, err := s.alarms(ctx)
	if err != nil {
		return nil, toGRPCError(err)
	}
	rev, _ := s.store.Revisions()
	st := s.hdr.status()
	resp := &pb.StatusResponse{
		Header:           s.hdr.newHeader(rev),
		Version:          version.Version,
		DbSize:           size,
		Leader:           st.Leader,
		RaftIndex:        st.Index,
		RaftAppliedIndex: st.Applied,
		RaftTerm:         st.Term,
		DbSizeInUse:      inUse,
		IsLearner:        false,
		StorageVersion:   storageVersion(),
		DbSizeQuota:      s.quota,
		DowngradeInfo:    &pb.DowngradeInfo{Enabled: false},
	}
	if resp.DbSizeQuota < 0 {
		resp.DbSizeQuota = 0
	}
	for _, a := range alarms {
		resp.Errors = append(resp.Errors, a.String())
	}
	return resp, nil
}

// alarms returns the active alarms.
func (s *maintenanceServer) alarms(ctx context.Context) ([]*pb.AlarmMember, error) {
	resp, err := s.store.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_GET})
	if err != nil {
		return nil, err
	}
	return resp.Alarms, nil
}

func (s *maintenanceServer) Alarm(ctx context.Context, r *pb.AlarmRequest) (*pb.AlarmResponse, error) {
	resp, err := s.store.Alarm(ctx, r)
	if err != nil {
		return nil, toGRPCError(err)
	}
	resp.Header = s.hdr.fill(resp.Header)
	return resp, nil
}

func (s *maintenanceServer) Defragment(ctx context.Context, r *pb.DefragmentRequest) (*pb.DefragmentResponse, error) {
	s.log.InfoContext(ctx, "starting defragment")
	start := time.Now()
	if err := s.store.Backend().Defragment(ctx); err != nil {
		s.log.WarnContext(ctx, "failed to defragment", "error", err)
		return nil, toGRPCError(err)
	}
	s.log.InfoContext(ctx, "finished defragment", "took", time.Since(start))
	return &pb.DefragmentResponse{}, nil // etcd's answer carries no header
}

// Hash hashes the whole key space. etcd hashes its bolt file; kite's file
// layout is the driver's business, so it hashes every row visible at the
// current revision instead, which changes exactly when the data does.
func (s *maintenanceServer) Hash(ctx context.Context, r *pb.HashRequest) (*pb.HashResponse, error) {
	h, err := s.store.HashKV(ctx, 0)
	if err != nil {
		return nil, toGRPCError(err)
	}
	return &pb.HashResponse{Header: s.hdr.fill(h.Header), Hash: h.Hash}, nil
}

func (s *maintenanceServer) HashKV(ctx context.Context, r *pb.HashKVRequest) (*pb.HashKVResponse, error) {
	resp, err := s.store.HashKV(ctx, r.Revision)
	if err != nil {
		return nil, toGRPCError(err)
	}
	resp.Header = s.hdr.fill(resp.Header)
	return resp, nil
}

// MoveLeader hands raft leadership to the target and answers, as etcd
// does, without a header. A single member is always the leader: a
// transfer to itself succeeds at once, one to anyone else names no member.
func (s *maintenanceServer) MoveLeader(ctx context.Context, r *pb.MoveLeaderRequest) (*pb.MoveLeaderResponse, error) {
	if err := s.hdr.cluster.moveLeader(ctx, r.TargetID); err != nil {
		return nil, toGRPCError(err)
	}
	return &pb.MoveLeaderResponse{}, nil
}

// Downgrade: kite's storage has no older schema to go back to. VALIDATE and
// ENABLE are refused with etcd's "invalid downgrade target version"; CANCEL
// has nothing to cancel and, like etcd, still answers the cluster version.
func (s *maintenanceServer) Downgrade(ctx context.Context, r *pb.DowngradeRequest) (*pb.DowngradeResponse, error) {
	switch r.Action {
	case pb.DowngradeRequest_CANCEL:
		return &pb.DowngradeResponse{Header: s.hdr.newHeader(0), Version: version.Cluster(version.Version)}, nil
	case pb.DowngradeRequest_VALIDATE, pb.DowngradeRequest_ENABLE:
		return nil, rpctypes.ErrGRPCInvalidDowngradeTargetVersion
	default:
		return nil, errUnknownMethod
	}
}
