package server

import (
	"context"
	"errors"
	"io"
	"log/slog"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/kite-db/kite/pkg/mvcc"
)

// leaseServer is etcd's Lease service.
type leaseServer struct {
	pb.UnsafeLeaseServer

	store           *mvcc.Store
	hdr             *header
	log             *slog.Logger
	maxRequestBytes int
	// stopping is closed when the server shuts down (see watchServer).
	stopping <-chan struct{}
	authz    *authorizer
}

var _ pb.LeaseServer = (*leaseServer)(nil)

func (s *leaseServer) LeaseGrant(ctx context.Context, r *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	if err := checkRequestSize(&pb.InternalRaftRequest{LeaseGrant: r}, s.maxRequestBytes); err != nil {
		return nil, err
	}
	resp, err := s.store.LeaseGrant(ctx, r)
	if err != nil {
		return nil, toGRPCError(err)
	}
	resp.Header = s.hdr.fill(resp.Header)
	return resp, nil
}

func (s *leaseServer) LeaseRevoke(ctx context.Context, r *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	if err := checkRequestSize(&pb.InternalRaftRequest{LeaseRevoke: r}, s.maxRequestBytes); err != nil {
		return nil, err
	}
	resp, err := s.store.LeaseRevoke(ctx, r)
	if err != nil {
		return nil, toGRPCError(err)
	}
	resp.Header = s.hdr.fill(resp.Header)
	return resp, nil
}

// LeaseTimeToLive answers TTL -1 for an unknown lease instead of an error,
// as etcd does (clients read TTL -1 as "expired or never existed").
func (s *leaseServer) LeaseTimeToLive(ctx context.Context, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	resp, err := s.store.LeaseTimeToLive(ctx, r)
	if errors.Is(err, mvcc.ErrLeaseNotFound) {
		resp, err = &pb.LeaseTimeToLiveResponse{ID: r.GetID(), TTL: -1}, nil
	}
	if err != nil {
		return nil, toGRPCError(err)
	}
	resp.Header = s.hdr.fill(resp.Header)
	return resp, nil
}

func (s *leaseServer) LeaseLeases(ctx context.Context, r *pb.LeaseLeasesRequest) (*pb.LeaseLeasesResponse, error) {
	resp, err := s.store.LeaseLeases(ctx, r)
	if errors.Is(err, mvcc.ErrLeaseNotFound) {
		resp, err = &pb.LeaseLeasesResponse{Leases: []*pb.LeaseStatus{}}, nil
	}
	if err != nil {
		return nil, toGRPCError(err)
	}
	resp.Header = s.hdr.fill(resp.Header)
	return resp, nil
}

// LeaseKeepAlive renews a lease per request. The receive loop runs in its
// own goroutine so that the handler returns as soon as the stream's context
// ends even while Recv is blocked (etcd does the same).
func (s *leaseServer) LeaseKeepAlive(stream pb.Lease_LeaseKeepAliveServer) error {
	errc := make(chan error, 1)
	go func() { errc <- s.keepAliveLoop(stream) }()
	select {
	case err := <-errc:
		return err
	case <-stream.Context().Done():
		return toGRPCError(stream.Context().Err())
	case <-s.stopping:
		return rpctypes.ErrGRPCStopped
	}
}

func (s *leaseServer) keepAliveLoop(stream pb.Lease_LeaseKeepAliveServer) error {
	ctx := stream.Context()
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			logStreamError(ctx, s.log, "receive lease keepalive request", err)
			return err
		}
		// The header is taken before the renewal, as in etcd: its revision
		// must not be newer than the moment the lease was known alive, or a
		// client could see a keepalive succeed after the lease's revoke.
		if s.authz.enabled() {
			if err := s.authz.renewPermitted(ctx, req.ID); err != nil {
				return toGRPCError(err)
			}
		}
		resp := &pb.LeaseKeepAliveResponse{ID: req.ID, Header: s.hdr.newHeader(0)}
		ttl, err := s.store.LeaseRenew(ctx, req.ID)
		if errors.Is(err, mvcc.ErrLeaseNotFound) {
			// TTL 0 tells the client the lease is gone; the stream goes on.
			ttl, err = 0, nil
		}
		if err != nil {
			return toGRPCError(err)
		}
		resp.TTL = ttl
		if err := stream.Send(resp); err != nil {
			logStreamError(ctx, s.log, "send lease keepalive response", err)
			return err
		}
	}
}
