package test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/kite-db/kite/pkg/server/tlstest"
)

// Differential tests of etcd's auth: every Auth RPC, the root rules, and the
// permission errors of every request kind, on etcd and on kite, compared
// field by field (tokens, which are random, compared for presence only).

// authAs runs req on s as user (authenticated on s with password; "" for
// no token at all).
func authAs(user, password string, req any) op {
	return func(ctx context.Context, s *server) (proto.Message, error) {
		if user != "" {
			resp, err := pb.NewAuthClient(s.Client.ActiveConnection()).Authenticate(ctx,
				&pb.AuthenticateRequest{Name: user, Password: password})
			if err != nil {
				return nil, fmt.Errorf("authenticate %s: %w", user, err)
			}
			ctx = metadata.AppendToOutgoingContext(ctx, rpctypes.TokenFieldNameGRPC, resp.Token)
		}
		return doAuth(ctx, s, req)
	}
}

// withToken runs req with a token that no server issued.
func withToken(token string, req any) op {
	return func(ctx context.Context, s *server) (proto.Message, error) {
		return doAuth(metadata.AppendToOutgoingContext(ctx, rpctypes.TokenFieldNameGRPC, token), s, req)
	}
}

// doAuth is do for the Auth service's requests and a watch create, the
// rest as do.
func doAuth(ctx context.Context, s *server, req any) (proto.Message, error) {
	a := pb.NewAuthClient(s.Client.ActiveConnection())
	switch r := req.(type) {
	case *pb.AuthEnableRequest:
		return a.AuthEnable(ctx, r)
	case *pb.AuthDisableRequest:
		return a.AuthDisable(ctx, r)
	case *pb.AuthStatusRequest:
		return a.AuthStatus(ctx, r)
	case *pb.AuthenticateRequest:
		return a.Authenticate(ctx, r)
	case *pb.AuthUserAddRequest:
		return a.UserAdd(ctx, r)
	case *pb.AuthUserGetRequest:
		return a.UserGet(ctx, r)
	case *pb.AuthUserListRequest:
		return a.UserList(ctx, r)
	case *pb.AuthUserDeleteRequest:
		return a.UserDelete(ctx, r)
	case *pb.AuthUserChangePasswordRequest:
		return a.UserChangePassword(ctx, r)
	case *pb.AuthUserGrantRoleRequest:
		return a.UserGrantRole(ctx, r)
	case *pb.AuthUserRevokeRoleRequest:
		return a.UserRevokeRole(ctx, r)
	case *pb.AuthRoleAddRequest:
		return a.RoleAdd(ctx, r)
	case *pb.AuthRoleGetRequest:
		return a.RoleGet(ctx, r)
	case *pb.AuthRoleListRequest:
		return a.RoleList(ctx, r)
	case *pb.AuthRoleDeleteRequest:
		return a.RoleDelete(ctx, r)
	case *pb.AuthRoleGrantPermissionRequest:
		return a.RoleGrantPermission(ctx, r)
	case *pb.AuthRoleRevokePermissionRequest:
		return a.RoleRevokePermission(ctx, r)
	case *pb.WatchCreateRequest:
		return watchFirst(ctx, s, r)
	case *pb.MemberAddRequest:
		return s.Cluster.MemberAdd(ctx, r)
	}
	return do(ctx, s, req)
}

// watchFirst opens a watch and returns its first response (created, or
// canceled with the reason).
func watchFirst(ctx context.Context, s *server, r *pb.WatchCreateRequest) (proto.Message, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := s.Watch.Watch(ctx)
	if err != nil {
		return nil, err
	}
	if err := w.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: r}}); err != nil {
		return nil, err
	}
	resp, err := w.Recv()
	if err == io.EOF {
		return nil, fmt.Errorf("watch ended without a response")
	}
	return resp, err
}

// TestDiffAuth: enabling auth (refused without a root user and role),
// users and roles, key-range permissions and the errors of every request
// kind for root, a read-write user, a read-only user, a user without
// password, no token and a bad token; password change, revocations,
// deletions and disabling auth.
func TestDiffAuth(t *testing.T) {
	p := newPair(t)
	grant := func(role string, typ authpb.Permission_Type, key, end string) *pb.AuthRoleGrantPermissionRequest {
		return &pb.AuthRoleGrantPermissionRequest{Name: role, Perm: &authpb.Permission{PermType: typ, Key: bs(key), RangeEnd: bs(end)}}
	}
	root := func(req any) op { return authAs("root", "rootpw", req) }
	alice := func(req any) op { return authAs("alice", "alicepw", req) }
	bob := func(req any) op { return authAs("bob", "bobpw", req) }
	anon := func(req any) op { return authAs("", "", req) }
	p.run([]step{
		{"status, disabled", anon(&pb.AuthStatusRequest{})},
		{"authenticate while disabled", anon(&pb.AuthenticateRequest{Name: "root", Password: "x"})},
		{"enable without root", anon(&pb.AuthEnableRequest{})},
		{"add user without name", anon(&pb.AuthUserAddRequest{Name: "", Password: "x"})},
		{"add root", anon(&pb.AuthUserAddRequest{Name: "root", Password: "rootpw"})},
		{"add root again", anon(&pb.AuthUserAddRequest{Name: "root", Password: "other"})},
		{"enable without root role", anon(&pb.AuthEnableRequest{})},
		{"add role root", anon(&pb.AuthRoleAddRequest{Name: "root"})},
		{"grant unknown role", anon(&pb.AuthUserGrantRoleRequest{User: "root", Role: "nope"})},
		{"grant root to root", anon(&pb.AuthUserGrantRoleRequest{User: "root", Role: "root"})},
		{"add role rw", anon(&pb.AuthRoleAddRequest{Name: "rw"})},
		{"add role rw again", anon(&pb.AuthRoleAddRequest{Name: "rw"})},
		{"add role without name", anon(&pb.AuthRoleAddRequest{Name: ""})},
		{"rw may read and write [a, c)", anon(grant("rw", authpb.READWRITE, "a", "c"))},
		{"add role ro", anon(&pb.AuthRoleAddRequest{Name: "ro"})},
		{"ro may read prefix p/", anon(grant("ro", authpb.READ, "p/", prefixEnd("p/")))},
		{"ro may write key w", anon(grant("ro", authpb.WRITE, "w", ""))},
		{"add alice", anon(&pb.AuthUserAddRequest{Name: "alice", Password: "alicepw"})},
		{"alice gets rw", anon(&pb.AuthUserGrantRoleRequest{User: "alice", Role: "rw"})},
		{"add bob", anon(&pb.AuthUserAddRequest{Name: "bob", Password: "bobpw"})},
		{"bob gets ro", anon(&pb.AuthUserGrantRoleRequest{User: "bob", Role: "ro"})},
		{"add carol without password", anon(&pb.AuthUserAddRequest{Name: "carol", Options: &authpb.UserAddOptions{NoPassword: true}})},
		{"put before enable", anon(put("a1", "v"))},
		{"enable", anon(&pb.AuthEnableRequest{})},
		{"status, enabled", anon(&pb.AuthStatusRequest{})},
		{"enable again as root", root(&pb.AuthEnableRequest{})},

		{"anonymous put", anon(put("a", "1"))},
		{"anonymous range", anon(rng("a", ""))},
		{"anonymous status", anon(&pb.StatusRequest{})},
		{"anonymous user list", anon(&pb.AuthUserListRequest{})},
		{"anonymous lease grant", anon(&pb.LeaseGrantRequest{ID: 7, TTL: 60})},
		{"anonymous watch", anon(&pb.WatchCreateRequest{Key: bs("a")})},
		{"bad token", withToken("not-a-token.1", rng("a", ""))},
		{"wrong password", anon(&pb.AuthenticateRequest{Name: "alice", Password: "nope"})},
		{"unknown user", anon(&pb.AuthenticateRequest{Name: "mallory", Password: "x"})},
		{"no-password user", anon(&pb.AuthenticateRequest{Name: "carol", Password: "x"})},

		{"alice puts a", alice(put("a", "1"))},
		{"alice puts b with prev", alice(&pb.PutRequest{Key: bs("b"), Value: bs("2"), PrevKv: true})},
		{"alice puts c: denied", alice(put("c", "3"))},
		{"alice reads [a, c)", alice(rng("a", "c"))},
		{"alice reads [a, d): denied", alice(rng("a", "d"))},
		{"alice reads everything: denied", alice(all())},
		{"alice txn compare outside", alice(txn(cmps(cmpr("z", pb.Compare_VERSION, pb.Compare_EQUAL, 0)), ops(opPut(put("a", "x"))), nil))},
		{"alice txn failure branch outside", alice(txn(cmps(cmpr("a", pb.Compare_VERSION, pb.Compare_GREATER, 0)), ops(opPut(put("a", "y"))), ops(opPut(put("q", "no")))))},
		{"alice txn inside", alice(txn(cmps(cmpr("a", pb.Compare_VERSION, pb.Compare_GREATER, 0)), ops(opPut(put("b", "z")), opRange(rng("a", "c"))), nil))},
		{"alice nested txn outside", alice(txn(nil, ops(opTxn(txn(nil, ops(opDel(del("x", ""))), nil))), nil))},
		{"alice deletes b", alice(&pb.DeleteRangeRequest{Key: bs("b"), PrevKv: true})},
		{"alice deletes [a, z): denied", alice(del("a", "z"))},
		{"alice watches a", alice(&pb.WatchCreateRequest{Key: bs("a")})},
		{"alice watches everything: denied", alice(&pb.WatchCreateRequest{Key: bs("\x00"), RangeEnd: bs("\x00")})},
		{"alice range stream outside: denied", alice(rangeStream{rng("a", "z")})},
		{"alice gets herself", alice(&pb.AuthUserGetRequest{Name: "alice"})},
		{"alice gets root: denied", alice(&pb.AuthUserGetRequest{Name: "root"})},
		{"alice gets role rw", alice(&pb.AuthRoleGetRequest{Role: "rw"})},
		{"alice gets role ro: denied", alice(&pb.AuthRoleGetRequest{Role: "ro"})},
		{"alice lists users: denied", alice(&pb.AuthUserListRequest{})},
		{"alice lists roles: denied", alice(&pb.AuthRoleListRequest{})},
		{"alice adds a user: denied", alice(&pb.AuthUserAddRequest{Name: "eve", Password: "x"})},
		{"alice disables auth: denied", alice(&pb.AuthDisableRequest{})},
		{"alice compacts: denied", alice(&pb.CompactionRequest{Revision: 2})},
		{"alice hashkv: denied", alice(&pb.HashKVRequest{})},
		{"alice status", alice(&pb.StatusRequest{})},
		{"alice lists alarms", alice(&pb.AlarmRequest{Action: pb.AlarmRequest_GET})},
		{"alice raises an alarm: denied", alice(&pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, Alarm: pb.AlarmType_NOSPACE})},
		{"alice adds a member: denied", alice(&pb.MemberAddRequest{PeerURLs: []string{"http://127.0.0.1:1"}})},
		{"alice grants a lease", alice(&pb.LeaseGrantRequest{ID: 100, TTL: 600})},
		{"alice puts a with the lease", alice(putLease("a", "leased", 100))},
		{"bob grants a lease", bob(&pb.LeaseGrantRequest{ID: 200, TTL: 600})},
		{"bob puts w with his lease", bob(putLease("w", "b", 200))},
		{"bob attaches alice's lease: denied", bob(putLease("w", "b2", 100))},
		{"bob revokes alice's lease: denied", bob(&pb.LeaseRevokeRequest{ID: 100})},
		{"bob time-to-live with keys: denied", bob(&pb.LeaseTimeToLiveRequest{ID: 100, Keys: true})},
		{"bob time-to-live without keys", bob(&pb.LeaseTimeToLiveRequest{ID: 100})},
		{"bob lists leases: denied", bob(&pb.LeaseLeasesRequest{})},
		{"bob reads p/", bob(rng("p/", prefixEnd("p/")))},
		{"bob writes p/x: denied", bob(put("p/x", "1"))},
		{"root puts p/x", root(put("p/x", "1"))},
		{"bob reads p/x", bob(rng("p/x", ""))},
		{"alice revokes her lease", alice(&pb.LeaseRevokeRequest{ID: 100})},
		{"root lists leases", root(&pb.LeaseLeasesRequest{})},

		{"root lists users", root(&pb.AuthUserListRequest{})},
		{"root lists roles", root(&pb.AuthRoleListRequest{})},
		{"root gets alice", root(&pb.AuthUserGetRequest{Name: "alice"})},
		{"root gets role ro", root(&pb.AuthRoleGetRequest{Role: "ro"})},
		{"root gets unknown user", root(&pb.AuthUserGetRequest{Name: "nope"})},
		{"root gets unknown role", root(&pb.AuthRoleGetRequest{Role: "nope"})},
		{"root changes alice's password", root(&pb.AuthUserChangePasswordRequest{Name: "alice", Password: "new"})},
		{"alice with the old password", anon(&pb.AuthenticateRequest{Name: "alice", Password: "alicepw"})},
		{"alice with the new password", authAs("alice", "new", rng("a", ""))},
		{"revoke a permission not granted", root(&pb.AuthRoleRevokePermissionRequest{Role: "rw", Key: bs("zz")})},
		{"revoke rw's permission", root(&pb.AuthRoleRevokePermissionRequest{Role: "rw", Key: bs("a"), RangeEnd: bs("c")})},
		{"alice, rw without permission", authAs("alice", "new", rng("a", ""))},
		{"revoke a role not granted", root(&pb.AuthUserRevokeRoleRequest{Name: "alice", Role: "ro"})},
		{"revoke rw from alice", root(&pb.AuthUserRevokeRoleRequest{Name: "alice", Role: "rw"})},
		{"root compacts", root(&pb.CompactionRequest{Revision: 2})},
		{"delete role ro", root(&pb.AuthRoleDeleteRequest{Role: "ro"})},
		{"delete unknown role", root(&pb.AuthRoleDeleteRequest{Role: "ro"})},
		{"bob without role", bob(rng("p/x", ""))},
		{"delete user bob", root(&pb.AuthUserDeleteRequest{Name: "bob"})},
		{"delete unknown user", root(&pb.AuthUserDeleteRequest{Name: "bob"})},
		{"revoke root's root role: refused", root(&pb.AuthUserRevokeRoleRequest{Name: "root", Role: "root"})},
		{"delete root role: refused", root(&pb.AuthRoleDeleteRequest{Role: "root"})},
		{"delete root user: refused", root(&pb.AuthUserDeleteRequest{Name: "root"})},
		{"disable as root", root(&pb.AuthDisableRequest{})},
		{"status, disabled again", anon(&pb.AuthStatusRequest{})},
		{"anonymous put after disable", anon(put("after", "1"))},
		{"users kept", anon(&pb.AuthUserListRequest{})},
	})
	// No password, nor the token of a session, in kite's log.
	ctx := testCtx(t, 10*time.Second)
	if _, err := authAs("", "", &pb.AuthEnableRequest{})(ctx, p.kite.server); err != nil {
		t.Fatal(err)
	}
	tok, err := pb.NewAuthClient(p.kite.Client.ActiveConnection()).Authenticate(ctx, &pb.AuthenticateRequest{Name: "root", Password: "rootpw"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := withToken(tok.Token, put("a", "secret-by-token"))(ctx, p.kite.server); err != nil {
		t.Fatal(err)
	}
	log := p.kite.log.Tail(1 << 22)
	for _, secret := range []string{"rootpw", "alicepw", "bobpw", tok.Token} {
		if strings.Contains(log, secret) {
			t.Errorf("kite's log holds %q", secret)
		}
	}
}

// TestDiffAuthJWT: with --auth-token jwt (etcd's option syntax, RS256 keys
// made here), tokens are JWTs both servers accept and check alike; a token
// signed by another key is refused.
func TestDiffAuthJWT(t *testing.T) {
	dir := t.TempDir()
	writeKey := func(name string) (priv, pub string) {
		key, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			t.Fatal(err)
		}
		pubDER, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
		if err != nil {
			t.Fatal(err)
		}
		priv, pub = filepath.Join(dir, name+".key"), filepath.Join(dir, name+".pub")
		if err := os.WriteFile(priv, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(pub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o600); err != nil {
			t.Fatal(err)
		}
		return priv, pub
	}
	priv, pub := writeKey("jwt")
	p := newPair(t, "--auth-token=jwt,pub-key="+pub+",priv-key="+priv+",sign-method=RS256,ttl=10m")
	grant := &pb.AuthRoleGrantPermissionRequest{Name: "rw", Perm: &authpb.Permission{PermType: authpb.READWRITE, Key: bs("a"), RangeEnd: bs("c")}}
	// A JWT signed with another key, for user root: refused.
	forged := func(ctx context.Context, s *server) (proto.Message, error) {
		otherPriv, _ := writeKey("other")
		b, err := os.ReadFile(otherPriv)
		if err != nil {
			return nil, err
		}
		block, _ := pem.Decode(b)
		key, err := x509.ParsePKCS1PrivateKey(block.Bytes)
		if err != nil {
			return nil, err
		}
		tok, err := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"username": "root", "revision": 1,
			"exp": time.Now().Add(time.Hour).Unix()}).SignedString(key)
		if err != nil {
			return nil, err
		}
		return withToken(tok, rng("a", ""))(ctx, s)
	}
	p.run([]step{
		{"add root", authAs("", "", &pb.AuthUserAddRequest{Name: "root", Password: "rootpw"})},
		{"root role", authAs("", "", &pb.AuthUserGrantRoleRequest{User: "root", Role: "root"})},
		{"add role rw", authAs("", "", &pb.AuthRoleAddRequest{Name: "rw"})},
		{"grant rw", authAs("", "", grant)},
		{"add alice", authAs("", "", &pb.AuthUserAddRequest{Name: "alice", Password: "alicepw"})},
		{"alice gets rw", authAs("", "", &pb.AuthUserGrantRoleRequest{User: "alice", Role: "rw"})},
		{"enable", authAs("", "", &pb.AuthEnableRequest{})},
		{"alice puts a (JWT)", authAs("alice", "alicepw", put("a", "1"))},
		{"alice reads outside: denied", authAs("alice", "alicepw", rng("x", ""))},
		{"root reads all", authAs("root", "rootpw", all())},
		{"forged token", op(forged)},
		{"garbage token", withToken("a.b.c", rng("a", ""))},
	})
}

// TestDiffAuthClientCert: with --client-cert-auth, a request without a
// token is the user its certificate names (CN), without a password, on
// etcd and on kite alike.
func TestDiffAuthClientCert(t *testing.T) {
	pki := newTLSPKI(t)
	setup := tlsSetup{certFile: pki.certFile, keyFile: pki.keyFile, caFile: pki.caFile, clientCertAuth: true}
	etcdAddr, err := startEtcdTLS(t, setup)
	if err != nil {
		t.Fatal(err)
	}
	kiteAddr, err := startKiteTLS(t, setup)
	if err != nil {
		t.Fatal(err)
	}
	certs := map[string]*tlstest.Cert{}
	for _, cn := range []string{"root", "alice", "nobody"} {
		certs[cn] = pki.ca.Issue(t, tlstest.Options{CommonName: cn})
	}
	// One connection per server and certificate.
	servers := map[string]map[string]*server{}
	for name, addr := range map[string]string{"etcd": etcdAddr, "kite": kiteAddr} {
		servers[name] = map[string]*server{}
		for cn, cert := range certs {
			c, err := clientv3.New(clientv3.Config{Endpoints: []string{"https://" + addr},
				TLS: pki.client(t, cert, true), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			conn := c.ActiveConnection()
			servers[name][cn] = &server{name: name, Client: c, KV: pb.NewKVClient(conn), Lease: pb.NewLeaseClient(conn),
				Watch: pb.NewWatchClient(conn), Maint: pb.NewMaintenanceClient(conn), Cluster: pb.NewClusterClient(conn)}
		}
	}
	as := func(cn string, req any) op {
		return func(ctx context.Context, s *server) (proto.Message, error) {
			return doAuth(ctx, servers[s.name][cn], req)
		}
	}
	p := &pair{t: t, etcd: &etcdServer{server: &server{name: "etcd"}}, kite: &kiteProcess{server: &server{name: "kite"}}}
	grant := &pb.AuthRoleGrantPermissionRequest{Name: "app", Perm: &authpb.Permission{PermType: authpb.READWRITE, Key: bs("a"), RangeEnd: bs("c")}}
	p.run([]step{
		{"add root", as("root", &pb.AuthUserAddRequest{Name: "root", Password: "rootpw"})},
		{"root role", as("root", &pb.AuthRoleAddRequest{Name: "root"})},
		{"grant root", as("root", &pb.AuthUserGrantRoleRequest{User: "root", Role: "root"})},
		{"add app", as("root", &pb.AuthRoleAddRequest{Name: "app"})},
		{"grant app", as("root", grant)},
		{"add alice without password", as("root", &pb.AuthUserAddRequest{Name: "alice", Options: &authpb.UserAddOptions{NoPassword: true}})},
		{"alice gets app", as("root", &pb.AuthUserGrantRoleRequest{User: "alice", Role: "app"})},
		{"enable (the root certificate)", as("root", &pb.AuthEnableRequest{})},
		{"alice's certificate puts a", as("alice", put("a", "1"))},
		{"alice's certificate puts z: denied", as("alice", put("z", "1"))},
		{"alice's certificate reads a", as("alice", rng("a", ""))},
		{"alice's certificate lists users: denied", as("alice", &pb.AuthUserListRequest{})},
		{"an unknown user's certificate", as("nobody", rng("a", ""))},
		{"the root certificate lists users", as("root", &pb.AuthUserListRequest{})},
		{"the root certificate reads all", as("root", all())},
		{"disable", as("root", &pb.AuthDisableRequest{})},
	})
}
