package server

import (
	"context"
	"math"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"

	"github.com/kite-db/kite/pkg/mvcc"
)

// kvServer is etcd's KV service: validation as in etcd's v3rpc, then the
// store, then the cluster fields of the header.
type kvServer struct {
	pb.UnsafeKVServer

	store           *mvcc.Store
	hdr             *header
	maxTxnOps       int
	maxRequestBytes int
	metrics         *kvMetrics
	authz           *authorizer
}

var _ pb.KVServer = (*kvServer)(nil)

func (s *kvServer) Range(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	if err := checkRangeRequest(r); err != nil {
		return nil, err
	}
	resp, err := s.store.Range(ctx, r)
	if err != nil {
		return nil, toGRPCError(err)
	}
	s.metrics.rangeDone()
	resp.Header = s.hdr.fill(resp.Header)
	return resp, nil
}

func (s *kvServer) Put(ctx context.Context, r *pb.PutRequest) (*pb.PutResponse, error) {
	if err := checkPutRequest(r); err != nil {
		return nil, err
	}
	if err := s.checkSize(&pb.InternalRaftRequest{Put: r}); err != nil {
		return nil, err
	}
	done := s.metrics.write()
	resp, err := s.store.Put(ctx, r)
	done(err)
	if err != nil {
		return nil, toGRPCError(err)
	}
	s.metrics.putDone(r)
	resp.Header = s.hdr.fill(resp.Header)
	return resp, nil
}

func (s *kvServer) DeleteRange(ctx context.Context, r *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	if err := checkDeleteRequest(r); err != nil {
		return nil, err
	}
	if err := s.checkSize(&pb.InternalRaftRequest{DeleteRange: r}); err != nil {
		return nil, err
	}
	done := s.metrics.write()
	resp, err := s.store.DeleteRange(ctx, r)
	done(err)
	if err != nil {
		return nil, toGRPCError(err)
	}
	s.metrics.deleteDone(r)
	resp.Header = s.hdr.fill(resp.Header)
	return resp, nil
}

func (s *kvServer) Txn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	if err := checkTxn(r, s.maxTxnOps); err != nil {
		return nil, err
	}
	if !mvcc.IsReadOnlyTxn(r) {
		if err := s.checkSize(&pb.InternalRaftRequest{Txn: r}); err != nil {
			return nil, err
		}
	}
	done := func(error) {}
	if !mvcc.IsReadOnlyTxn(r) {
		done = s.metrics.write()
	}
	resp, err := s.store.Txn(ctx, r)
	done(err)
	if err != nil {
		return nil, toGRPCError(err)
	}
	s.metrics.txnDone(r, resp)
	// Nested responses keep the revision-only headers the store gives
	// them, as etcd's do.
	resp.Header = s.hdr.fill(resp.Header)
	return resp, nil
}

func (s *kvServer) Compact(ctx context.Context, r *pb.CompactionRequest) (*pb.CompactionResponse, error) {
	if err := s.checkSize(&pb.InternalRaftRequest{Compaction: r}); err != nil {
		return nil, err
	}
	done := s.metrics.write()
	resp, err := s.store.Compact(ctx, r)
	done(err)
	if err != nil {
		return nil, toGRPCError(err)
	}
	resp.Header = s.hdr.fill(resp.Header)
	return resp, nil
}

// checkSize applies etcd's limit on proposals: the request wrapped in an
// InternalRaftRequest with a request ID, encoded, may not exceed
// MaxRequestBytes. Sizing the same wrapper makes kite reject at exactly the
// byte count etcd rejects.
func (s *kvServer) checkSize(r *pb.InternalRaftRequest) error {
	return checkRequestSize(r, s.maxRequestBytes)
}

func checkRequestSize(r *pb.InternalRaftRequest, maxBytes int) error {
	// etcd's request IDs carry the member ID in their top bits, so they
	// always take the full ten varint bytes.
	r.Header = &pb.RequestHeader{ID: math.MaxUint64}
	if proto.Size(r) > maxBytes {
		return toGRPCError(mvcc.ErrRequestTooLarge)
	}
	return nil
}
