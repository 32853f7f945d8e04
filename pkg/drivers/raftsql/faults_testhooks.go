//go:build kitetest

package raftsql

import (
	"errors"
	"net/http"
)

// Test faults, compiled only into a binary built with -tags kitetest (as
// tests build kite; faults.go is the release build's). With
// Config.TestFaults.Serve the peer URLs also serve /kite/test/fail-apply, which
// makes the next write statement (a Put or Delete) of this member's SQLite
// fail, as a storage error would, inside the transaction that applies a
// committed entry (the database is left as it was): to test that a member
// stops rather than serve a state that differs from the others', and
// recovers on restart. A member started without the setting does not
// serve it. Partitions need no hook: the tests cut real links between
// network namespaces (test/netns_test.go).
const pathFailApply = "/kite/test/fail-apply"

// errTestApplyFault is the storage error /kite/test/fail-apply injects.
var errTestApplyFault = errors.New("raftsql: test fault: the database refused the write")

// TestFaults is Config.TestFaults in a kitetest build.
type TestFaults struct {
	// Serve serves the hooks on the peer URLs.
	Serve bool
}

// handleFaults serves the fault hooks when Config.TestFaults says so.
func (n *Node) handleFaults(mux *http.ServeMux) {
	if !n.cfg.TestFaults.Serve {
		return
	}
	mux.HandleFunc(pathFailApply, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "POST only", http.StatusMethodNotAllowed)
			return
		}
		// The SQLite under a memtail too: its flush then fails, which
		// fails the next apply as well.
		n.db.acquire()
		n.db.sq.FailNextWrite(errTestApplyFault)
		n.db.release()
		n.log.Warn("test fault: the next write to the database fails")
	})
}
