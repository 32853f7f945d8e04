package raftsql

import (
	"net/http"

	"go.etcd.io/etcd/client/pkg/v3/types"
)

// Test faults. With Config.TestFaults the peer URLs also serve
// /kite/test/isolate, which cuts this member off from every other (raft
// messages are dropped both ways, as by a network partition, while clients
// still reach it), and /kite/test/heal, which mends the links. Tests use
// them to partition a leader without network namespaces; a member started
// without the setting does not serve them.
const (
	pathIsolate = "/kite/test/isolate"
	pathHeal    = "/kite/test/heal"
)

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
			for _, m := range n.memberList() {
				if m.ID != n.id {
					f(types.ID(m.ID))
				}
			}
			n.log.Warn("test fault", "path", r.URL.Path)
		}
	}
	mux.HandleFunc(pathIsolate, each(n.transport.CutPeer))
	mux.HandleFunc(pathHeal, each(n.transport.MendPeer))
}
