package test

import (
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// The auth state is data: a restart keeps it, and every raftsql member and
// every kite server sharing one Postgres or MySQL database enforces what was
// set through any one of them.

// setUpAuth makes root and alice (read-write on [a, c)) through s and
// enables auth.
func setUpAuth(t *testing.T, s *server) {
	t.Helper()
	ctx := testCtx(t, 30*time.Second)
	for _, req := range []any{
		&pb.AuthUserAddRequest{Name: "root", Password: "rootpw"},
		&pb.AuthRoleAddRequest{Name: "root"},
		&pb.AuthUserGrantRoleRequest{User: "root", Role: "root"},
		&pb.AuthRoleAddRequest{Name: "rw"},
		&pb.AuthRoleGrantPermissionRequest{Name: "rw", Perm: &authpb.Permission{PermType: authpb.READWRITE, Key: bs("a"), RangeEnd: bs("c")}},
		&pb.AuthUserAddRequest{Name: "alice", Password: "alicepw"},
		&pb.AuthUserGrantRoleRequest{User: "alice", Role: "rw"},
		&pb.AuthEnableRequest{},
	} {
		if _, err := authAs("", "", req)(ctx, s); err != nil {
			t.Fatalf("%T through %s: %v", req, s.name, err)
		}
	}
}

// checkAuthEnforced checks, through s, that auth is on and alice may
// write a but not z, with etcd's errors.
func checkAuthEnforced(t *testing.T, s *server) {
	t.Helper()
	ctx := testCtx(t, 30*time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := authAs("", "", put("b", "anonymous"))(ctx, s)
		if isErr(err, rpctypes.ErrGRPCUserEmpty) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: a put without a token: %v; want %v", s.name, err, rpctypes.ErrGRPCUserEmpty)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := authAs("alice", "alicepw", put("a", "1"))(ctx, s); err != nil {
		t.Errorf("%s: alice's put of a: %v", s.name, err)
	}
	if _, err := authAs("alice", "alicepw", put("z", "1"))(ctx, s); !isErr(err, rpctypes.ErrGRPCPermissionDenied) {
		t.Errorf("%s: alice's put of z: %v; want %v", s.name, err, rpctypes.ErrGRPCPermissionDenied)
	}
	if _, err := pb.NewAuthClient(s.Client.ActiveConnection()).Authenticate(ctx, &pb.AuthenticateRequest{Name: "alice", Password: "wrong"}); !isErr(err, rpctypes.ErrGRPCAuthFailed) {
		t.Errorf("%s: alice with a wrong password: %v; want %v", s.name, err, rpctypes.ErrGRPCAuthFailed)
	}
}

// TestAuthSurvivesRestart: users, roles, permissions and the enabled flag
// are read back after kite is killed and restarted, in every storage mode.
func TestAuthSurvivesRestart(t *testing.T) {
	k := startKite(t)
	setUpAuth(t, k.server)
	checkAuthEnforced(t, k.server)
	k.Kill()
	k.Restart()
	checkAuthEnforced(t, k.server)
}

// TestAuthOnEveryMember: auth set up through one raftsql member is
// enforced by the others.
func TestAuthOnEveryMember(t *testing.T) {
	c := startCluster(t, 3)
	setUpAuth(t, c.members[0].server)
	for _, m := range c.members {
		checkAuthEnforced(t, m.server)
	}
}

// TestAuthOnEveryServer: auth set up through one of several kite servers
// on one database is enforced by the others, once per database-server kind.
func TestAuthOnEveryServer(t *testing.T) {
	forEachSharedKind(t, authOnEveryServer)
}

func authOnEveryServer(t *testing.T, kind string) {
	ks := startShared(t, kind, 2)
	setUpAuth(t, ks[0].server)
	for _, k := range ks {
		checkAuthEnforced(t, k.server)
	}
}
