package server

import (
	"context"
	"fmt"
	"testing"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"
)

// FuzzAuthRequests sends arbitrary Auth requests, without a token, to a
// store whose auth is enabled: none may panic, and none may change the
// auth state (only root may).
func FuzzAuthRequests(f *testing.F) {
	store := mustOpenStore(f)
	ctx := context.Background()
	for _, r := range []*pb.InternalRaftRequest{
		{AuthUserAdd: &pb.AuthUserAddRequest{Name: "root", Password: "rootpw"}},
		{AuthRoleAdd: &pb.AuthRoleAddRequest{Name: "root"}},
		{AuthUserGrantRole: &pb.AuthUserGrantRoleRequest{User: "root", Role: "root"}},
		{AuthRoleAdd: &pb.AuthRoleAddRequest{Name: "app"}},
		{AuthRoleGrantPermission: &pb.AuthRoleGrantPermissionRequest{Name: "app",
			Perm: &authpb.Permission{PermType: authpb.READWRITE, Key: []byte("a"), RangeEnd: []byte("b")}}},
		{AuthEnable: &pb.AuthEnableRequest{}},
	} {
		if _, err := store.AuthChange(ctx, r); err != nil {
			f.Fatalf("setup %v: %v", r, err)
		}
	}
	s := &authServer{store: store, hdr: testHeader(), authz: &authorizer{store: store}}
	state := func() string {
		as := store.Auth()
		users, _ := as.UserList(&pb.AuthUserListRequest{})
		roles, _ := as.RoleList(&pb.AuthRoleListRequest{})
		return fmt.Sprint(users.GetUsers(), roles.GetRoles(), as.Revision(), as.IsAuthEnabled())
	}
	before := state()
	f.Add(byte(0), []byte{})
	f.Add(byte(3), []byte("\n\x04root\x12\x01x"))
	f.Add(byte(9), []byte("\n\x03app"))
	f.Fuzz(func(t *testing.T, kind byte, data []byte) {
		var err error
		switch kind % 16 {
		case 0:
			_, err = s.AuthEnable(ctx, decode[pb.AuthEnableRequest](data))
		case 1:
			_, err = s.AuthDisable(ctx, decode[pb.AuthDisableRequest](data))
		case 2:
			_, err = s.AuthStatus(ctx, decode[pb.AuthStatusRequest](data))
		case 3:
			_, err = s.Authenticate(ctx, decode[pb.AuthenticateRequest](data))
		case 4:
			_, err = s.UserAdd(ctx, decode[pb.AuthUserAddRequest](data))
		case 5:
			_, err = s.UserGet(ctx, decode[pb.AuthUserGetRequest](data))
		case 6:
			_, err = s.UserList(ctx, decode[pb.AuthUserListRequest](data))
		case 7:
			_, err = s.UserDelete(ctx, decode[pb.AuthUserDeleteRequest](data))
		case 8:
			_, err = s.UserChangePassword(ctx, decode[pb.AuthUserChangePasswordRequest](data))
		case 9:
			_, err = s.RoleAdd(ctx, decode[pb.AuthRoleAddRequest](data))
		case 10:
			_, err = s.RoleGet(ctx, decode[pb.AuthRoleGetRequest](data))
		case 11:
			_, err = s.RoleDelete(ctx, decode[pb.AuthRoleDeleteRequest](data))
		case 12:
			_, err = s.RoleGrantPermission(ctx, decode[pb.AuthRoleGrantPermissionRequest](data))
		case 13:
			_, err = s.RoleRevokePermission(ctx, decode[pb.AuthRoleRevokePermissionRequest](data))
		case 14:
			_, err = s.UserGrantRole(ctx, decode[pb.AuthUserGrantRoleRequest](data))
		case 15:
			_, err = s.UserRevokeRole(ctx, decode[pb.AuthUserRevokeRoleRequest](data))
		}
		_ = err
		if after := state(); after != before {
			t.Fatalf("a request without a token changed the auth state:\nbefore %s\nafter  %s", before, after)
		}
	})
}

// decode is data as a T, or an empty T when it is not one.
func decode[T any, P interface {
	*T
	proto.Message
}](data []byte) P {
	m := P(new(T))
	if proto.Unmarshal(data, m) != nil {
		return P(new(T))
	}
	return m
}
