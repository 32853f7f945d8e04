package server

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/server/v3/auth"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kite-db/kite/pkg/membership"
	"github.com/kite-db/kite/pkg/mvcc"
)

// TestToGRPCError checks what a client sees for each store and auth
// sentinel, bare and wrapped with %w: the gRPC code and message must be
// those of etcd's, which clientv3 turns back into the typed rpctypes error
// (rpctypes.ErrCompacted, ...) its callers compare against. The
// expectations are etcd's client-side values, not errorMap's entries, so a
// mapping to the wrong status fails here.
func TestToGRPCError(t *testing.T) {
	for _, tt := range []struct {
		err error
		// want is etcd's client-side typed error, or the status etcd
		// answers where clientv3 has no typed error for it.
		want error
	}{
		{mvcc.ErrCompacted, rpctypes.ErrCompacted},
		{mvcc.ErrFutureRev, rpctypes.ErrFutureRev},
		{mvcc.ErrLeaseNotFound, rpctypes.ErrLeaseNotFound},
		{mvcc.ErrLeaseExists, rpctypes.ErrLeaseExist},
		{mvcc.ErrLeaseTTLTooLarge, rpctypes.ErrLeaseTTLTooLarge},
		{mvcc.ErrKeyNotFound, rpctypes.ErrKeyNotFound},
		{mvcc.ErrNoSpace, rpctypes.ErrNoSpace},
		{mvcc.ErrCorrupt, rpctypes.ErrCorrupt},
		{mvcc.ErrClosed, rpctypes.ErrStopped},
		{mvcc.ErrRequestTooLarge, rpctypes.ErrRequestTooLarge},
		{mvcc.ErrStopped, rpctypes.ErrStopped},
		{mvcc.ErrNoLeader, rpctypes.ErrNoLeader},
		{mvcc.ErrTimeout, rpctypes.ErrTimeout},
		{mvcc.ErrHistoryLost, rpctypes.ErrCorrupt},
		{membership.ErrMemberNotFound, rpctypes.ErrMemberNotFound},
		{membership.ErrMemberExists, rpctypes.ErrMemberExist},
		{membership.ErrPeerURLExists, rpctypes.ErrPeerURLExist},
		{membership.ErrMemberNotLearner, rpctypes.ErrMemberNotLearner},
		{membership.ErrTooManyLearners, rpctypes.ErrTooManyLearners},
		{membership.ErrLearnerNotReady, rpctypes.ErrGRPCLearnerNotReady}, // clientv3 has no typed error for it
		{membership.ErrMemberNotEnoughStarted, rpctypes.ErrMemberNotEnoughStarted},
		{membership.ErrUnhealthy, rpctypes.ErrUnhealthy},
		{membership.ErrNotLeader, rpctypes.ErrNotLeader},
		{membership.ErrBadLeaderTransferee, rpctypes.ErrBadLeaderTransferee},
		{membership.ErrLeaderTransferTimeout, errLeaderTransferTimeout},
		{auth.ErrRootUserNotExist, rpctypes.ErrRootUserNotExist},
		{auth.ErrRootRoleNotExist, rpctypes.ErrRootRoleNotExist},
		{auth.ErrUserAlreadyExist, rpctypes.ErrUserAlreadyExist},
		{auth.ErrUserEmpty, rpctypes.ErrUserEmpty},
		{auth.ErrUserNotFound, rpctypes.ErrUserNotFound},
		{auth.ErrRoleAlreadyExist, rpctypes.ErrRoleAlreadyExist},
		{auth.ErrRoleNotFound, rpctypes.ErrRoleNotFound},
		{auth.ErrRoleEmpty, rpctypes.ErrRoleEmpty},
		{auth.ErrAuthFailed, rpctypes.ErrAuthFailed},
		{auth.ErrPermissionNotGiven, rpctypes.ErrGRPCPermissionNotGiven},
		{auth.ErrPermissionDenied, rpctypes.ErrPermissionDenied},
		{auth.ErrRoleNotGranted, rpctypes.ErrRoleNotGranted},
		{auth.ErrPermissionNotGranted, rpctypes.ErrPermissionNotGranted},
		{auth.ErrAuthNotEnabled, rpctypes.ErrAuthNotEnabled},
		{auth.ErrInvalidAuthToken, rpctypes.ErrInvalidAuthToken},
		{auth.ErrInvalidAuthMgmt, rpctypes.ErrInvalidAuthMgmt},
		{auth.ErrAuthOldRevision, rpctypes.ErrAuthOldRevision},
	} {
		code, msg := codeAndMessage(tt.want)
		for _, err := range wrappings(tt.err) {
			got := toGRPCError(err)
			st, ok := status.FromError(got)
			if !ok || st.Code() != code || st.Message() != msg {
				t.Errorf("%q: got %v; want code %v, message %q", err, got, code, msg)
				continue
			}
			if _, typed := tt.want.(rpctypes.EtcdError); typed && rpctypes.Error(got) != tt.want {
				t.Errorf("%q: a client sees %#v; want %#v", err, rpctypes.Error(got), tt.want)
			}
		}
	}

	// etcd's clients have no typed error for these: code and message are
	// etcd's (status.FromContextError's codes, v3rpc's texts).
	for _, tt := range []struct {
		err  error
		code codes.Code
		msg  string
	}{
		{context.Canceled, codes.Canceled, "etcdserver: request canceled"},
		{context.DeadlineExceeded, codes.DeadlineExceeded, "etcdserver: context deadline exceeded"},
		{errors.New("disk on fire"), codes.Unknown, "disk on fire"},
	} {
		for _, err := range wrappings(tt.err) {
			st, ok := status.FromError(toGRPCError(err))
			// An unknown error keeps its whole text, wrapping included.
			msg := tt.msg
			if tt.code == codes.Unknown {
				msg = err.Error()
			}
			if !ok || st.Code() != tt.code || st.Message() != msg {
				t.Errorf("%q: got %v; want code %v, message %q", err, st, tt.code, msg)
			}
		}
	}

	// Storage unavailable: the code etcd's clients retry on, with the
	// storage's own text (no etcd text exists for it).
	// A write that lost every attempt to a concurrent writer, likewise.
	for _, err := range append(wrappings(fmt.Errorf("%w: commit: connection reset", mvcc.ErrUnavailable)),
		wrappings(fmt.Errorf("%w: commit: Error 1213: Deadlock found", mvcc.ErrConflict))...) {
		if st, _ := status.FromError(toGRPCError(err)); st.Code() != codes.Unavailable || st.Message() != err.Error() {
			t.Errorf("%q: got %v; want code Unavailable with the storage's text", err, st)
		}
	}

	// Statuses pass through untouched, even ones that wrap nothing known.
	for _, err := range []error{rpctypes.ErrGRPCEmptyKey, status.Error(codes.Aborted, "mvcc: required revision has been compacted")} {
		if got := toGRPCError(err); got != err {
			t.Errorf("%v: got %v; want it unchanged", err, got)
		}
	}
	if toGRPCError(nil) != nil {
		t.Error("nil error mapped to non-nil")
	}

}

// codeAndMessage is the gRPC code and message of one of etcd's errors, a
// client-side rpctypes.EtcdError or a status.
func codeAndMessage(err error) (codes.Code, string) {
	if e, ok := err.(rpctypes.EtcdError); ok {
		return e.Code(), e.Error()
	}
	st := status.Convert(err)
	return st.Code(), st.Message()
}

// wrappings returns err bare, wrapped once and wrapped twice with %w.
func wrappings(err error) []error {
	return []error{err, fmt.Errorf("range: %w", err), fmt.Errorf("txn: %w", fmt.Errorf("commit: %w", err))}
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

// TestToGRPCErrorSpecialCases: a lost history wrapped with an unreachable
// storage, statuses passing through, unknown errors and the errors etcd
// has no counterpart for.
func TestToGRPCErrorSpecialCases(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want error
	}{
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
