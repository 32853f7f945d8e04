//go:build kitetest

package raftsql

import (
	"errors"
	"net/http"

	"go.etcd.io/etcd/client/pkg/v3/types"
)

// Test faults, compiled only into a binary built with -tags kitetest (as
// tests build kite; faults.go is the release build's). With
// Config.TestFaults the peer URLs also serve
// /kite/test/isolate, which cuts this member off from every other (raft
// messages are dropped both ways, as by a network partition, while clients
// still reach it), and /kite/test/heal, which mends the links. Tests use
// them to partition a leader without network namespaces; a member started
// without the setting does not serve them. /kite/test/fail-apply makes the
// next write statement (a Put or Delete) of this member's SQLite fail, as
// a storage error would, inside the transaction that applies a committed
// entry (the database is left as it was): to test that a member stops
// rather than serve a state that differs from the others', and recovers
// on restart.
const (
	pathIsolate   = "/kite/test/isolate"
	pathHeal      = "/kite/test/heal"
	pathFailApply = "/kite/test/fail-apply"
)

// errTestApplyFault is the storage error /kite/test/fail-apply injects.
var errTestApplyFault = errors.New("raftsql: test fault: the database refused the write")

// handleFaults serves the fault hooks when Config.TestFaults is set.
func (n *Node) handleFaults(mux *http.ServeMux) {
	if !n.cfg.TestFaults {
		return
	}
	each := func(f func(types.ID)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodPost {
				http.Error(w, "POST only", http.StatusMethodNotAllowed)
				return
			}
			for _, m := range n.cluster.list() {
				if m.ID != n.id {
					f(types.ID(m.ID))
				}
			}
			n.log.Warn("test fault", "path", r.URL.Path)
		}
	}
	mux.HandleFunc(pathIsolate, each(n.transport.CutPeer))
	mux.HandleFunc(pathHeal, each(n.transport.MendPeer))
	mux.HandleFunc(pathFailApply, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "POST only", http.StatusMethodNotAllowed)
			return
		}
		b := n.db.acquire()
		b.FailNextWrite(errTestApplyFault)
		n.db.release()
		n.log.Warn("test fault: the next write to the database fails")
	})
}
