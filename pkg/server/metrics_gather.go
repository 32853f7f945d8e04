package server

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// raftDefaultMetrics are the metric families etcd's own packages register
// in prometheus' default registry and that a raftsql member really feeds:
// rafthttp's peer traffic and round trips, the WAL's writes and fsyncs,
// the snapshotter's. Everything else in the default registry is left out:
// etcd packages linked into kite register their whole metric sets there
// (zeros that would contradict kite's own), and its Go and process
// collectors duplicate the server registry's.
var raftDefaultMetrics = []string{
	"etcd_network_peer_",
	"etcd_network_active_peers",
	"etcd_network_disconnected_peers_total",
	"etcd_network_snapshot_",
	"etcd_disk_wal_",
	"etcd_snap_",
	"etcd_debugging_snap_",
}

// filteredGatherer keeps the families whose name starts with one of
// prefixes.
type filteredGatherer struct {
	g        prometheus.Gatherer
	prefixes []string
}

func (f filteredGatherer) Gather() ([]*dto.MetricFamily, error) {
	mfs, err := f.g.Gather()
	kept := mfs[:0]
	for _, mf := range mfs {
		for _, p := range f.prefixes {
			if strings.HasPrefix(mf.GetName(), p) {
				kept = append(kept, mf)
				break
			}
		}
	}
	return kept, err
}
