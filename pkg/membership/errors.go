package membership

import "errors"

// The errors a member returns for a refused membership change or leader
// transfer. pkg/server gives the client etcd's gRPC error for each; the
// raftsql peer API carries them between members by name.
var (
	// ErrMemberNotFound: no member has the ID (or it was removed).
	ErrMemberNotFound = errors.New("membership: member not found")
	// ErrMemberExists: a member with the ID is already in the cluster.
	ErrMemberExists = errors.New("membership: member already exists")
	// ErrPeerURLExists: another member already has one of the peer URLs.
	ErrPeerURLExists = errors.New("membership: peer URL already exists")
	// ErrMemberNotLearner: only a learner can be promoted.
	ErrMemberNotLearner = errors.New("membership: member is not a learner")
	// ErrTooManyLearners: the cluster already has as many learners as it
	// allows.
	ErrTooManyLearners = errors.New("membership: too many learners")
	// ErrLearnerNotReady: the learner's log is too far behind the leader's
	// to be promoted.
	ErrLearnerNotReady = errors.New("membership: learner not ready")
	// ErrMemberNotEnoughStarted: the change would leave fewer started
	// voters than a quorum.
	ErrMemberNotEnoughStarted = errors.New("membership: not enough started members")
	// ErrUnhealthy: the change would leave fewer connected voters than a
	// quorum.
	ErrUnhealthy = errors.New("membership: unhealthy cluster")
	// ErrNotLeader: the request must be made to (or answered by) the
	// leader and this member is not.
	ErrNotLeader = errors.New("membership: not leader")
	// ErrBadLeaderTransferee: the transfer target is not a member.
	ErrBadLeaderTransferee = errors.New("membership: bad leader transferee")
	// ErrLeaderTransferTimeout: the target did not take the lead in time.
	ErrLeaderTransferTimeout = errors.New("membership: leader transfer timed out")
)
