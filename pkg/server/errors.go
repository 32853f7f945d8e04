package server

import (
	"context"
	"errors"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/server/v3/auth"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kite-db/kite/pkg/membership"
	"github.com/kite-db/kite/pkg/mvcc"
)

// errLeaderTransferTimeout is etcd's answer when a leader transfer takes
// too long (etcdserver.ErrTimeoutLeaderTransfer, which rpctypes does not
// declare: its text, with the code clients retry).
var errLeaderTransferTimeout = status.Error(codes.Unavailable, "etcdserver: request timed out, leader transfer took too long")

// errorMap pairs each sentinel a handler can see with the gRPC status etcd
// answers for it. Order does not matter: sentinels are distinct.
var errorMap = []struct {
	err  error
	grpc error
}{
	{mvcc.ErrCompacted, rpctypes.ErrGRPCCompacted},
	{mvcc.ErrFutureRev, rpctypes.ErrGRPCFutureRev},
	{mvcc.ErrLeaseNotFound, rpctypes.ErrGRPCLeaseNotFound},
	{mvcc.ErrLeaseExists, rpctypes.ErrGRPCLeaseExist},
	{mvcc.ErrLeaseTTLTooLarge, rpctypes.ErrGRPCLeaseTTLTooLarge},
	{mvcc.ErrKeyNotFound, rpctypes.ErrGRPCKeyNotFound},
	{mvcc.ErrNoSpace, rpctypes.ErrGRPCNoSpace},
	{mvcc.ErrCorrupt, rpctypes.ErrGRPCCorrupt},
	{mvcc.ErrHistoryLost, rpctypes.ErrGRPCCorrupt},
	{mvcc.ErrClosed, rpctypes.ErrGRPCStopped},
	{mvcc.ErrRequestTooLarge, rpctypes.ErrGRPCRequestTooLarge},
	// A replicated log's (raftsql) answers when it could not commit.
	{mvcc.ErrStopped, rpctypes.ErrGRPCStopped},
	{mvcc.ErrNoLeader, rpctypes.ErrGRPCNoLeader},
	{mvcc.ErrTimeout, rpctypes.ErrGRPCTimeout},
	// A Clustered member's membership and leadership errors (pkg/membership).
	{membership.ErrMemberNotFound, rpctypes.ErrGRPCMemberNotFound},
	{membership.ErrMemberExists, rpctypes.ErrGRPCMemberExist},
	{membership.ErrPeerURLExists, rpctypes.ErrGRPCPeerURLExist},
	{membership.ErrMemberNotLearner, rpctypes.ErrGRPCMemberNotLearner},
	{membership.ErrTooManyLearners, rpctypes.ErrGRPCTooManyLearners},
	{membership.ErrLearnerNotReady, rpctypes.ErrGRPCLearnerNotReady},
	{membership.ErrMemberNotEnoughStarted, rpctypes.ErrGRPCMemberNotEnoughStarted},
	{membership.ErrUnhealthy, rpctypes.ErrGRPCUnhealthy},
	{membership.ErrNotLeader, rpctypes.ErrGRPCNotLeader},
	{membership.ErrBadLeaderTransferee, rpctypes.ErrGRPCBadLeaderTransferee},
	{membership.ErrLeaderTransferTimeout, errLeaderTransferTimeout},
	// etcd's auth store's errors (go.etcd.io/etcd/server/v3/auth).
	{auth.ErrRootUserNotExist, rpctypes.ErrGRPCRootUserNotExist},
	{auth.ErrRootRoleNotExist, rpctypes.ErrGRPCRootRoleNotExist},
	{auth.ErrUserAlreadyExist, rpctypes.ErrGRPCUserAlreadyExist},
	{auth.ErrUserEmpty, rpctypes.ErrGRPCUserEmpty},
	{auth.ErrUserNotFound, rpctypes.ErrGRPCUserNotFound},
	{auth.ErrRoleAlreadyExist, rpctypes.ErrGRPCRoleAlreadyExist},
	{auth.ErrRoleNotFound, rpctypes.ErrGRPCRoleNotFound},
	{auth.ErrRoleEmpty, rpctypes.ErrGRPCRoleEmpty},
	{auth.ErrAuthFailed, rpctypes.ErrGRPCAuthFailed},
	{auth.ErrPermissionNotGiven, rpctypes.ErrGRPCPermissionNotGiven},
	{auth.ErrPermissionDenied, rpctypes.ErrGRPCPermissionDenied},
	{auth.ErrRoleNotGranted, rpctypes.ErrGRPCRoleNotGranted},
	{auth.ErrPermissionNotGranted, rpctypes.ErrGRPCPermissionNotGranted},
	{auth.ErrAuthNotEnabled, rpctypes.ErrGRPCAuthNotEnabled},
	{auth.ErrInvalidAuthToken, rpctypes.ErrGRPCInvalidAuthToken},
	{auth.ErrInvalidAuthMgmt, rpctypes.ErrGRPCInvalidAuthMgmt},
	{auth.ErrAuthOldRevision, rpctypes.ErrGRPCAuthOldRevision},
	// In sync with status.FromContextError, as etcd's togRPCError.
	{context.Canceled, rpctypes.ErrGRPCCanceled},
	{context.DeadlineExceeded, rpctypes.ErrGRPCDeadlineExceeded},
}

// toGRPCError is the one place where errors from the store become what a
// client sees. Errors that already are gRPC statuses (validation) pass
// through; unknown errors become codes.Unknown with their text, as in etcd.
func toGRPCError(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	for _, m := range errorMap {
		if errors.Is(err, m.err) {
			return m.grpc
		}
	}
	if errors.Is(err, mvcc.ErrUnavailable) || errors.Is(err, mvcc.ErrConflict) {
		// Unavailable is the code etcd's clients retry (reads at once,
		// writes when the application says so), as after etcd's own
		// "request timed out"; the text keeps what the storage said. A
		// write that lost every attempt to a concurrent writer
		// (ErrConflict) was not committed and may be sent again.
		return status.Error(codes.Unavailable, err.Error())
	}
	// mvcc.ErrTooManyChanges (a DeleteRange or lease revoke of more keys
	// than one revision holds) and mvcc.ErrDiskFull have no etcd
	// counterpart: etcd has no such bound, and stops on a full disk. Both
	// stay Unknown with the storage's text, which says what to do.
	return status.Error(codes.Unknown, err.Error())
}
