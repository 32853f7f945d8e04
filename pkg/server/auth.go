package server

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// authServer: kite has no authentication yet. Only AuthStatus answers (auth
// disabled), which is what `etcdctl auth status` and clients probing for
// auth ask; every other Auth RPC is Unimplemented.
type authServer struct {
	pb.UnimplementedAuthServer

	hdr *header
}

func (s *authServer) AuthStatus(ctx context.Context, r *pb.AuthStatusRequest) (*pb.AuthStatusResponse, error) {
	return &pb.AuthStatusResponse{Header: s.hdr.newHeader(0), Enabled: false}, nil
}
