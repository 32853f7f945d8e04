package raftsql

import (
	"errors"
	"net/http"

	"github.com/kite-db/kite/pkg/membership"
	"github.com/kite-db/kite/pkg/mvcc"
)

// headerPeerError names, in a member's answer over the peer API, the
// sentinel error its handler returned, so the member that asked (a
// follower forwarding to the leader) returns that same sentinel and
// pkg/server answers the client as if the leader had been asked.
const headerPeerError = "Kite-Error"

// peerError pairs a sentinel with the name that travels for it. Names are
// part of the peer API between members of different kite versions: never
// change one.
type peerError struct {
	name string
	err  error
}

// peerErrors lists every sentinel that may cross the peer API.
func peerErrors() []peerError {
	return []peerError{
		{"lease-not-found", mvcc.ErrLeaseNotFound},
		{"stopped", mvcc.ErrStopped},
		{"no-leader", mvcc.ErrNoLeader},
		{"timeout", mvcc.ErrTimeout},
		{"closed", mvcc.ErrClosed},
		{"unavailable", mvcc.ErrUnavailable},
		{"not-leader", membership.ErrNotLeader},
		{"member-not-found", membership.ErrMemberNotFound},
		{"member-not-learner", membership.ErrMemberNotLearner},
		{"learner-not-ready", membership.ErrLearnerNotReady},
		{"member-not-enough-started", membership.ErrMemberNotEnoughStarted},
		{"unhealthy", membership.ErrUnhealthy},
	}
}

// peerErrorName is the name err travels under, or "" for an error that
// is none of peerErrors (it travels as text, and the asking member
// retries).
func peerErrorName(err error) string {
	for _, pe := range peerErrors() {
		if errors.Is(err, pe.err) {
			return pe.name
		}
	}
	return ""
}

// peerErrorOf is the sentinel named name, or nil for a name this member
// does not know (a newer member's).
func peerErrorOf(name string) error {
	for _, pe := range peerErrors() {
		if pe.name == name {
			return pe.err
		}
	}
	return nil
}

// retryAtLeader reports the answers after which the asking member asks
// again (another leader, or the same once it is one): the member asked
// was not, or no longer, the leader.
func retryAtLeader(err error) bool {
	return errors.Is(err, membership.ErrNotLeader) || errors.Is(err, mvcc.ErrNoLeader) ||
		errors.Is(err, mvcc.ErrStopped) || errors.Is(err, mvcc.ErrClosed)
}

// writePeerError answers a peer request with err: by name when it is one
// of peerErrors, else as text with 503, which the asking member retries.
func writePeerError(w http.ResponseWriter, err error) {
	if name := peerErrorName(err); name != "" {
		w.Header().Set(headerPeerError, name)
		http.Error(w, err.Error(), http.StatusConflict)
		return
	}
	http.Error(w, err.Error(), http.StatusServiceUnavailable)
}
