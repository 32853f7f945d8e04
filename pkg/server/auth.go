package server

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/server/v3/auth"
	"google.golang.org/protobuf/proto"

	"github.com/kite-db/kite/pkg/mvcc"
)

// authServer is etcd's Auth service over the Store's auth store (etcd's own
// auth package, mvcc/auth.go): changes go through the write path, reads
// are answered from this server's copy of the state. Who may do what is
// etcd's: only root changes users, roles and auth itself and lists them; a
// user may read itself and the roles it has.
type authServer struct {
	pb.UnimplementedAuthServer

	store *mvcc.Store
	hdr   *header
	authz *authorizer
}

var _ pb.AuthServer = (*authServer)(nil)

// change checks that the caller is root (or auth is off) and applies r.
func (s *authServer) change(ctx context.Context, r *pb.InternalRaftRequest) (proto.Message, error) {
	ai, err := s.authz.info(ctx)
	if err != nil {
		return nil, toGRPCError(err)
	}
	if err := s.store.Auth().IsAdminPermitted(ai); err != nil {
		return nil, toGRPCError(err)
	}
	resp, err := s.store.AuthChange(ctx, r)
	if err != nil {
		return nil, toGRPCError(err)
	}
	return resp, nil
}

// withHeader sets etcd's header (current revision) on an auth response.
func withHeader[T interface {
	proto.Message
	GetHeader() *pb.ResponseHeader
}](s *authServer, resp proto.Message, err error, set func(T, *pb.ResponseHeader)) (T, error) {
	var zero T
	if err != nil {
		return zero, err
	}
	r := resp.(T)
	set(r, s.hdr.fill(r.GetHeader()))
	return r, nil
}

func (s *authServer) AuthEnable(ctx context.Context, r *pb.AuthEnableRequest) (*pb.AuthEnableResponse, error) {
	resp, err := s.change(ctx, &pb.InternalRaftRequest{AuthEnable: r})
	return withHeader(s, resp, err, func(r *pb.AuthEnableResponse, h *pb.ResponseHeader) { r.Header = h })
}

func (s *authServer) AuthDisable(ctx context.Context, r *pb.AuthDisableRequest) (*pb.AuthDisableResponse, error) {
	resp, err := s.change(ctx, &pb.InternalRaftRequest{AuthDisable: r})
	return withHeader(s, resp, err, func(r *pb.AuthDisableResponse, h *pb.ResponseHeader) { r.Header = h })
}

func (s *authServer) AuthStatus(ctx context.Context, r *pb.AuthStatusRequest) (*pb.AuthStatusResponse, error) {
	as := s.store.Auth()
	return &pb.AuthStatusResponse{Header: s.hdr.fill(nil), Enabled: as.IsAuthEnabled(), AuthRevision: as.Revision()}, nil
}

// Authenticate checks the password, then issues a token (etcd's simple
// token or a JWT, --auth-token). A simple token is valid on the server that
// issued it; clientv3 authenticates again when another server refuses it.
func (s *authServer) Authenticate(ctx context.Context, r *pb.AuthenticateRequest) (*pb.AuthenticateResponse, error) {
	as := s.store.Auth()
	password := r.Password
	r.Password = "" // never kept, nor logged
	if _, err := as.CheckPassword(r.Name, password); err != nil {
		return nil, toGRPCError(err)
	}
	prefix, err := as.GenTokenPrefix()
	if err != nil {
		return nil, toGRPCError(err)
	}
	rev, _ := s.store.Revisions()
	actx := context.WithValue(context.WithValue(ctx, auth.AuthenticateParamIndex{}, uint64(rev)),
		auth.AuthenticateParamSimpleTokenPrefix{}, prefix)
	resp, err := as.Authenticate(actx, r.Name, password)
	if err != nil {
		return nil, toGRPCError(err)
	}
	resp.Header = s.hdr.fill(resp.Header)
	return resp, nil
}

func (s *authServer) UserAdd(ctx context.Context, r *pb.AuthUserAddRequest) (*pb.AuthUserAddResponse, error) {
	resp, err := s.change(ctx, &pb.InternalRaftRequest{AuthUserAdd: r})
	return withHeader(s, resp, err, func(r *pb.AuthUserAddResponse, h *pb.ResponseHeader) { r.Header = h })
}

func (s *authServer) UserDelete(ctx context.Context, r *pb.AuthUserDeleteRequest) (*pb.AuthUserDeleteResponse, error) {
	resp, err := s.change(ctx, &pb.InternalRaftRequest{AuthUserDelete: r})
	return withHeader(s, resp, err, func(r *pb.AuthUserDeleteResponse, h *pb.ResponseHeader) { r.Header = h })
}

func (s *authServer) UserChangePassword(ctx context.Context, r *pb.AuthUserChangePasswordRequest) (*pb.AuthUserChangePasswordResponse, error) {
	resp, err := s.change(ctx, &pb.InternalRaftRequest{AuthUserChangePassword: r})
	return withHeader(s, resp, err, func(r *pb.AuthUserChangePasswordResponse, h *pb.ResponseHeader) { r.Header = h })
}

func (s *authServer) UserGrantRole(ctx context.Context, r *pb.AuthUserGrantRoleRequest) (*pb.AuthUserGrantRoleResponse, error) {
	resp, err := s.change(ctx, &pb.InternalRaftRequest{AuthUserGrantRole: r})
	return withHeader(s, resp, err, func(r *pb.AuthUserGrantRoleResponse, h *pb.ResponseHeader) { r.Header = h })
}

func (s *authServer) UserRevokeRole(ctx context.Context, r *pb.AuthUserRevokeRoleRequest) (*pb.AuthUserRevokeRoleResponse, error) {
	resp, err := s.change(ctx, &pb.InternalRaftRequest{AuthUserRevokeRole: r})
	return withHeader(s, resp, err, func(r *pb.AuthUserRevokeRoleResponse, h *pb.ResponseHeader) { r.Header = h })
}

func (s *authServer) RoleAdd(ctx context.Context, r *pb.AuthRoleAddRequest) (*pb.AuthRoleAddResponse, error) {
	resp, err := s.change(ctx, &pb.InternalRaftRequest{AuthRoleAdd: r})
	return withHeader(s, resp, err, func(r *pb.AuthRoleAddResponse, h *pb.ResponseHeader) { r.Header = h })
}

func (s *authServer) RoleDelete(ctx context.Context, r *pb.AuthRoleDeleteRequest) (*pb.AuthRoleDeleteResponse, error) {
	resp, err := s.change(ctx, &pb.InternalRaftRequest{AuthRoleDelete: r})
	return withHeader(s, resp, err, func(r *pb.AuthRoleDeleteResponse, h *pb.ResponseHeader) { r.Header = h })
}

func (s *authServer) RoleGrantPermission(ctx context.Context, r *pb.AuthRoleGrantPermissionRequest) (*pb.AuthRoleGrantPermissionResponse, error) {
	resp, err := s.change(ctx, &pb.InternalRaftRequest{AuthRoleGrantPermission: r})
	return withHeader(s, resp, err, func(r *pb.AuthRoleGrantPermissionResponse, h *pb.ResponseHeader) { r.Header = h })
}

func (s *authServer) RoleRevokePermission(ctx context.Context, r *pb.AuthRoleRevokePermissionRequest) (*pb.AuthRoleRevokePermissionResponse, error) {
	resp, err := s.change(ctx, &pb.InternalRaftRequest{AuthRoleRevokePermission: r})
	return withHeader(s, resp, err, func(r *pb.AuthRoleRevokePermissionResponse, h *pb.ResponseHeader) { r.Header = h })
}

// UserGet: root, or the user itself.
func (s *authServer) UserGet(ctx context.Context, r *pb.AuthUserGetRequest) (*pb.AuthUserGetResponse, error) {
	as := s.store.Auth()
	ai, err := s.authz.info(ctx)
	if err != nil {
		return nil, toGRPCError(err)
	}
	if err := as.IsAdminPermitted(ai); err != nil && (ai == nil || r.Name != ai.Username) {
		return nil, toGRPCError(err)
	}
	resp, err := as.UserGet(r)
	if err != nil {
		return nil, toGRPCError(err)
	}
	resp.Header = s.hdr.fill(resp.Header)
	return resp, nil
}

// RoleGet: root, or a user that has the role.
func (s *authServer) RoleGet(ctx context.Context, r *pb.AuthRoleGetRequest) (*pb.AuthRoleGetResponse, error) {
	as := s.store.Auth()
	ai, err := s.authz.info(ctx)
	if err != nil {
		return nil, toGRPCError(err)
	}
	if err := as.IsAdminPermitted(ai); err != nil && (ai == nil || !as.HasRole(ai.Username, r.Role)) {
		return nil, toGRPCError(err)
	}
	resp, err := as.RoleGet(r)
	if err != nil {
		return nil, toGRPCError(err)
	}
	resp.Header = s.hdr.fill(resp.Header)
	return resp, nil
}

func (s *authServer) UserList(ctx context.Context, r *pb.AuthUserListRequest) (*pb.AuthUserListResponse, error) {
	as := s.store.Auth()
	if err := s.authz.admin(ctx); err != nil {
		return nil, err
	}
	resp, err := as.UserList(r)
	if err != nil {
		return nil, toGRPCError(err)
	}
	resp.Header = s.hdr.fill(resp.Header)
	return resp, nil
}

func (s *authServer) RoleList(ctx context.Context, r *pb.AuthRoleListRequest) (*pb.AuthRoleListResponse, error) {
	as := s.store.Auth()
	if err := s.authz.admin(ctx); err != nil {
		return nil, err
	}
	resp, err := as.RoleList(r)
	if err != nil {
		return nil, toGRPCError(err)
	}
	resp.Header = s.hdr.fill(resp.Header)
	return resp, nil
}
