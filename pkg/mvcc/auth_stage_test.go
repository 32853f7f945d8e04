package mvcc_test

import (
	"context"
	"errors"
	"testing"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/server/v3/auth"
)

// An auth change becomes visible to permission checks only once its batch
// committed: while the transaction is open, and after it rolled back, the
// live auth store answers as before it.
func TestAuthChangeVisibleOnlyAfterCommit(t *testing.T) {
	s, f := openFaulty(t)
	ctx := context.Background()
	userVisible := func() bool {
		_, err := s.Auth().UserGet(&pb.AuthUserGetRequest{Name: "eve"})
		if err != nil && !errors.Is(err, auth.ErrUserNotFound) {
			t.Fatalf("user get: %v", err)
		}
		return err == nil
	}
	var seenDuring []bool
	observe := func() { seenDuring = append(seenDuring, userVisible()) }
	f.beforeCommit.Store(&observe)

	// The batch that adds eve fails to commit.
	f.failCommit.Store(f.commits.Load() + 1)
	add := &pb.InternalRaftRequest{AuthUserAdd: &pb.AuthUserAddRequest{Name: "eve", Options: &authpb.UserAddOptions{NoPassword: true}}}
	if _, err := s.AuthChange(ctx, add); !errors.Is(err, errInjected) {
		t.Fatalf("user add in a batch whose commit fails: err %v, want the injected failure", err)
	}
	if len(seenDuring) != 1 || seenDuring[0] {
		t.Fatalf("user visible while its batch was uncommitted: %v", seenDuring)
	}
	if userVisible() {
		t.Fatal("user of a rolled-back batch is visible")
	}

	// The same change committed: visible after the commit, not before.
	seenDuring = nil
	if _, err := s.AuthChange(ctx, add); err != nil {
		t.Fatalf("user add: %v", err)
	}
	if len(seenDuring) != 1 || seenDuring[0] {
		t.Fatalf("user visible before its batch committed: %v", seenDuring)
	}
	if !userVisible() {
		t.Fatal("committed user is not visible")
	}

	// Enabling auth needs root; a rolled-back enable leaves it disabled.
	for _, r := range []*pb.InternalRaftRequest{
		{AuthUserAdd: &pb.AuthUserAddRequest{Name: "root", Options: &authpb.UserAddOptions{NoPassword: true}}},
		{AuthRoleAdd: &pb.AuthRoleAddRequest{Name: "root"}},
		{AuthUserGrantRole: &pb.AuthUserGrantRoleRequest{User: "root", Role: "root"}},
	} {
		if _, err := s.AuthChange(ctx, r); err != nil {
			t.Fatalf("%v: %v", r, err)
		}
	}
	var enabledDuring []bool
	observeEnabled := func() { enabledDuring = append(enabledDuring, s.Auth().IsAuthEnabled()) }
	f.beforeCommit.Store(&observeEnabled)
	f.failCommit.Store(f.commits.Load() + 1)
	if _, err := s.AuthChange(ctx, &pb.InternalRaftRequest{AuthEnable: &pb.AuthEnableRequest{}}); !errors.Is(err, errInjected) {
		t.Fatalf("auth enable in a batch whose commit fails: err %v, want the injected failure", err)
	}
	if len(enabledDuring) != 1 || enabledDuring[0] || s.Auth().IsAuthEnabled() {
		t.Fatalf("auth enabled by an uncommitted or rolled-back batch: during %v, after %v", enabledDuring, s.Auth().IsAuthEnabled())
	}
	if _, err := s.AuthChange(ctx, &pb.InternalRaftRequest{AuthEnable: &pb.AuthEnableRequest{}}); err != nil {
		t.Fatalf("auth enable: %v", err)
	}
	if !s.Auth().IsAuthEnabled() {
		t.Fatal("committed auth enable is not visible")
	}
}
