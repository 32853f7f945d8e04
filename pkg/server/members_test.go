package server

import (
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// TestSingleMemberCluster: a server that is a cluster of its own answers
// the Cluster and Maintenance calls about its membership as one etcd
// member would, and refuses changes with the reason.
func TestSingleMemberCluster(t *testing.T) {
	srv, endpoint := mustStartServer(t, Config{})
	cli := newClient(t, endpoint)
	ctx := testContext(t)
	self := srv.cluster.id()
	other := self ^ 1

	for _, tt := range []struct {
		name string
		call func() error
		want error
	}{
		{"remove unknown", func() error { _, err := cli.MemberRemove(ctx, other); return err }, rpctypes.ErrMemberNotFound},
		{"remove self", func() error { _, err := cli.MemberRemove(ctx, self); return err }, errNeedsRaftSQL},
		{"update unknown", func() error {
			_, err := cli.MemberUpdate(ctx, other, []string{"http://127.0.0.1:2380"})
			return err
		}, rpctypes.ErrMemberNotFound},
		{"update self", func() error {
			_, err := cli.MemberUpdate(ctx, self, []string{"http://127.0.0.1:2380"})
			return err
		}, errNeedsRaftSQL},
		{"add", func() error { _, err := cli.MemberAdd(ctx, []string{"http://127.0.0.1:2380"}); return err }, errNeedsRaftSQL},
		{"promote unknown", func() error { _, err := cli.MemberPromote(ctx, other); return err }, rpctypes.ErrMemberNotFound},
		{"promote self", func() error { _, err := cli.MemberPromote(ctx, self); return err }, rpctypes.ErrMemberNotLearner},
		{"move leader to another", func() error { _, err := cli.MoveLeader(ctx, other); return err }, rpctypes.ErrBadLeaderTransferee},
	} {
		// The client turns etcd's own errors into rpctypes values and
		// leaves kite's as a status: both are compared by what they say.
		if err := tt.call(); err == nil || rpctypes.ErrorDesc(err) != rpctypes.ErrorDesc(tt.want) {
			t.Errorf("%s: %v; want %v", tt.name, err, tt.want)
		}
	}

	// A transfer to itself succeeds at once and, as etcd's, answers
	// without a header.
	resp, err := pb.NewMaintenanceClient(cli.ActiveConnection()).MoveLeader(ctx, &pb.MoveLeaderRequest{TargetID: self})
	if err != nil || resp.Header != nil {
		t.Errorf("move leader to itself: %v, %v; want no error and no header", resp, err)
	}
	st, err := cli.Status(ctx, endpoint)
	if err != nil {
		t.Fatal(err)
	}
	if st.Leader != self || st.RaftTerm != singleTerm || st.IsLearner || st.RaftIndex != uint64(st.Header.Revision) {
		t.Errorf("status %+v; want itself the leader in term %d, its revision as the index", st, singleTerm)
	}
}
