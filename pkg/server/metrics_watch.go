package server

import (
	"github.com/prometheus/client_golang/prometheus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// watchMetrics are etcd's etcd_debugging_mvcc_watch_stream_total and
// watcher_total gauges: the open watch streams and the watchers on them.
// A watcher counts from the response that confirms it (created and not
// canceled, as etcd counts only watchers its store accepted) until its
// cancel response or the end of its stream.
type watchMetrics struct {
	streams, watchers prometheus.Gauge
}

func newWatchMetrics(reg prometheus.Registerer) *watchMetrics {
	m := &watchMetrics{
		streams: prometheus.NewGauge(prometheus.GaugeOpts{Name: "etcd_debugging_mvcc_watch_stream_total",
			Help: "Total number of watch streams."}),
		watchers: prometheus.NewGauge(prometheus.GaugeOpts{Name: "etcd_debugging_mvcc_watcher_total",
			Help: "Total number of watchers."}),
	}
	reg.MustRegister(m.streams, m.watchers)
	return m
}

// streamWatchers follows the watchers of one stream. It is used by the
// stream's send loop only.
type streamWatchers struct {
	m   *watchMetrics
	ids map[int64]struct{}
}

// openStream counts a new stream; a nil watchMetrics (a watchServer built
// without a registry, as in tests) counts nothing.
func (m *watchMetrics) openStream() *streamWatchers {
	if m == nil {
		return &streamWatchers{}
	}
	m.streams.Inc()
	return &streamWatchers{m: m, ids: map[int64]struct{}{}}
}

// sent notes a response the stream sent.
func (w *streamWatchers) sent(resp *pb.WatchResponse) {
	if w.m == nil {
		return
	}
	_, known := w.ids[resp.WatchId]
	switch {
	case resp.Created && !resp.Canceled && !known:
		w.ids[resp.WatchId] = struct{}{}
		w.m.watchers.Inc()
	case resp.Canceled && known:
		delete(w.ids, resp.WatchId)
		w.m.watchers.Dec()
	}
}

// close ends the stream and its watchers.
func (w *streamWatchers) close() {
	if w.m == nil {
		return
	}
	w.m.watchers.Sub(float64(len(w.ids)))
	w.m.streams.Dec()
}
