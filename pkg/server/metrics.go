package server

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/version"

	"github.com/kite-db/kite/pkg/mvcc"
)

// metricsTimeout bounds the database size query of one scrape.
const metricsTimeout = 5 * time.Second

// storeCollector exports, at scrape time, the etcd metrics that dashboards
// and alerts for etcd rely on most (kube-prometheus' etcd rules use
// has_leader and the db size ones), under etcd's names so they keep working.
type storeCollector struct {
	store *mvcc.Store
	hdr   *header
	quota int64

	hasLeader, isLeader, leaderChanges *prometheus.Desc
	dbSize, dbInUse, quotaBytes        *prometheus.Desc
	currentRev, compactRev             *prometheus.Desc
	serverVersion                      *prometheus.Desc
}

func newStoreCollector(store *mvcc.Store, hdr *header, quota int64) *storeCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &storeCollector{
		store:         store,
		hdr:           hdr,
		quota:         quota,
		hasLeader:     d("etcd_server_has_leader", "Whether or not a leader exists. 1 is existence, 0 is not."),
		isLeader:      d("etcd_server_is_leader", "Whether or not this member is a leader. 1 if is, 0 otherwise."),
		leaderChanges: d("etcd_server_leader_changes_seen_total", "The number of leader changes seen."),
		dbSize:        d("etcd_mvcc_db_total_size_in_bytes", "Total size of the underlying database physically allocated in bytes."),
		dbInUse:       d("etcd_mvcc_db_total_size_in_use_in_bytes", "Total size of the underlying database logically in use in bytes."),
		quotaBytes:    d("etcd_server_quota_backend_bytes", "Current backend storage quota size in bytes."),
		currentRev:    d("etcd_debugging_mvcc_current_revision", "The current revision of store."),
		compactRev:    d("etcd_debugging_mvcc_compact_revision", "The revision of the last compaction in store."),
		serverVersion: d("etcd_server_version", "Which version is running. 1 for 'server_version' label with current version.", "server_version"),
	}
}

func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.hasLeader, c.isLeader, c.leaderChanges, c.dbSize, c.dbInUse,
		c.quotaBytes, c.currentRev, c.compactRev, c.serverVersion} {
		ch <- d
	}
}

func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	st := c.hdr.status()
	gauge(c.hasLeader, b2f(st.Leader != 0))
	gauge(c.isLeader, b2f(st.Leader == c.hdr.memberID))
	ch <- prometheus.MustNewConstMetric(c.leaderChanges, prometheus.CounterValue, 0)
	gauge(c.quotaBytes, float64(max(c.quota, 0)))
	gauge(c.serverVersion, 1, version.Version)
	cur, compacted := c.store.Revisions()
	gauge(c.currentRev, float64(cur))
	gauge(c.compactRev, float64(compacted))
	ctx, cancel := context.WithTimeout(context.Background(), metricsTimeout)
	defer cancel()
	// On a failed size query the size metrics are left out of this scrape
	// rather than reported as 0, which would look like an empty database.
	if size, inUse, err := c.store.Backend().Size(ctx); err == nil {
		gauge(c.dbSize, float64(size))
		gauge(c.dbInUse, float64(inUse))
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
