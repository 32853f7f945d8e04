package server

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kite-db/kite/pkg/mvcc"
)

func TestToGRPCError(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want error
	}{
		{mvcc.ErrCompacted, rpctypes.ErrGRPCCompacted},
		{mvcc.ErrFutureRev, rpctypes.ErrGRPCFutureRev},
		{mvcc.ErrLeaseNotFound, rpctypes.ErrGRPCLeaseNotFound},
		{mvcc.ErrLeaseExists, rpctypes.ErrGRPCLeaseExist},
		{mvcc.ErrLeaseTTLTooLarge, rpctypes.ErrGRPCLeaseTTLTooLarge},
		{mvcc.ErrKeyNotFound, rpctypes.ErrGRPCKeyNotFound},
		{mvcc.ErrNoSpace, rpctypes.ErrGRPCNoSpace},
		{mvcc.ErrClosed, rpctypes.ErrGRPCStopped},
		{mvcc.ErrRequestTooLarge, rpctypes.ErrGRPCRequestTooLarge},
		{mvcc.ErrStopped, rpctypes.ErrGRPCStopped},
		{mvcc.ErrNoLeader, rpctypes.ErrGRPCNoLeader},
		{mvcc.ErrTimeout, rpctypes.ErrGRPCTimeout},
		{ErrMemberNotFound, rpctypes.ErrGRPCMemberNotFound},
		{ErrMemberExists, rpctypes.ErrGRPCMemberExist},
		{ErrPeerURLExists, rpctypes.ErrGRPCPeerURLExist},
		{ErrMemberNotLearner, rpctypes.ErrGRPCMemberNotLearner},
		{ErrTooManyLearners, rpctypes.ErrGRPCTooManyLearners},
		{ErrLearnerNotReady, rpctypes.ErrGRPCLearnerNotReady},
		{ErrMemberNotEnoughStarted, rpctypes.ErrGRPCMemberNotEnoughStarted},
		{ErrUnhealthy, rpctypes.ErrGRPCUnhealthy},
		{ErrNotLeader, rpctypes.ErrGRPCNotLeader},
		{ErrBadLeaderTransferee, rpctypes.ErrGRPCBadLeaderTransferee},
		{ErrLeaderTransferTimeout, errLeaderTransferTimeout},
		{context.Canceled, rpctypes.ErrGRPCCanceled},
		{context.DeadlineExceeded, rpctypes.ErrGRPCDeadlineExceeded},
		// Wrapped sentinels map the same way.
		{fmt.Errorf("range: %w", mvcc.ErrCompacted), rpctypes.ErrGRPCCompacted},
		{fmt.Errorf("commit: %w", context.DeadlineExceeded), rpctypes.ErrGRPCDeadlineExceeded},
		// A lost history is data loss, even when the storage was also
		// unreachable on the way.
		{mvcc.ErrHistoryLost, rpctypes.ErrGRPCCorrupt},
		{fmt.Errorf("%w: %w", mvcc.ErrUnavailable, mvcc.ErrHistoryLost), rpctypes.ErrGRPCCorrupt},
		// gRPC statuses pass through.
		{rpctypes.ErrGRPCEmptyKey, rpctypes.ErrGRPCEmptyKey},
	} {
		if got := toGRPCError(tt.err); got != tt.want {
			t.Errorf("%v: got %v, want %v", tt.err, got, tt.want)
		}
	}
	if toGRPCError(nil) != nil {
		t.Error("nil error mapped to non-nil")
	}
	got := toGRPCError(errors.New("disk on fire"))
	if st, _ := status.FromError(got); st.Code() != codes.Unknown || st.Message() != "disk on fire" {
		t.Errorf("unknown error: got %v", got)
	}
	// No etcd counterpart: Unknown with the storage's text, as before
	// these were sentinels.
	for _, err := range []error{
		fmt.Errorf("delete: %w: revision 9: change 1048576 is beyond ...", mvcc.ErrTooManyChanges),
		fmt.Errorf("commit: %w: database or disk is full", mvcc.ErrDiskFull),
	} {
		if st, _ := status.FromError(toGRPCError(err)); st.Code() != codes.Unknown || st.Message() != err.Error() {
			t.Errorf("%v: got %v; want code Unknown with the storage's text", err, st)
		}
	}
	if st, _ := status.FromError(errLeaderTransferTimeout); st.Code() != codes.Unavailable ||
		st.Message() != "etcdserver: request timed out, leader transfer took too long" {
		t.Errorf("leader transfer timeout: %v; want etcd's", st)
	}
	unavailable := fmt.Errorf("%w: commit: connection reset", mvcc.ErrUnavailable)
	if st, _ := status.FromError(toGRPCError(unavailable)); st.Code() != codes.Unavailable || st.Message() != unavailable.Error() {
		t.Errorf("storage unavailable: got %v; want code Unavailable with the storage's text", st)
	}
}

func TestRecoverInterceptors(t *testing.T) {
	log := testLogger(t)
	_, err := recoverUnary(log)(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/x/Y"},
		func(ctx context.Context, req any) (any, error) { panic("boom") })
	if status.Code(err) != codes.Internal {
		t.Fatalf("unary panic: got %v", err)
	}
	err = recoverStream(log)(nil, fakeServerStream{}, &grpc.StreamServerInfo{FullMethod: "/x/Z"},
		func(srv any, ss grpc.ServerStream) error { panic("boom") })
	if status.Code(err) != codes.Internal {
		t.Fatalf("stream panic: got %v", err)
	}
}

type fakeServerStream struct{ grpc.ServerStream }

func (fakeServerStream) Context() context.Context { return context.Background() }
