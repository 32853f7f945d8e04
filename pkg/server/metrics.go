package server

import (
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/version"

	"github.com/kite-db/kite/pkg/mvcc"
)

// metricsTimeout bounds the database queries (size, key count) of one
// scrape.
const metricsTimeout = 5 * time.Second

// storeCollector exports, at scrape time, etcd's metrics whose values the
// store or raft already hold, under etcd's names, types and help, so that
// etcd's dashboards and alerts (kube-prometheus' etcd rules) keep working.
type storeCollector struct {
	store *mvcc.Store
	hdr   *header
	// quota is --quota-backend-bytes; leader changes and proposals are
	// the cluster's (hdr.cluster.proposals).
	quota int64

	hasLeader, isLeader, leaderChanges        *prometheus.Desc
	committed, applied, pending, failed       *prometheus.Desc
	dbSize, dbInUse, quotaBytes, keys         *prometheus.Desc
	currentRev, compactRev, serverVersion, id *prometheus.Desc
	slowWatchers, writeConflicts              *prometheus.Desc
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
		committed:     d("etcd_server_proposals_committed_total", "The total number of consensus proposals committed."),
		applied:       d("etcd_server_proposals_applied_total", "The total number of consensus proposals applied."),
		pending:       d("etcd_server_proposals_pending", "The current number of pending proposals to commit."),
		failed:        d("etcd_server_proposals_failed_total", "The total number of failed proposals seen."),
		dbSize:        d("etcd_mvcc_db_total_size_in_bytes", "Total size of the underlying database physically allocated in bytes."),
		dbInUse:       d("etcd_mvcc_db_total_size_in_use_in_bytes", "Total size of the underlying database logically in use in bytes."),
		quotaBytes:    d("etcd_server_quota_backend_bytes", "Current backend storage quota size in bytes."),
		keys:          d("etcd_debugging_mvcc_keys_total", "Total number of keys."),
		currentRev:    d("etcd_debugging_mvcc_current_revision", "The current revision of store."),
		compactRev:    d("etcd_debugging_mvcc_compact_revision", "The revision of the last compaction in store."),
		serverVersion: d("etcd_server_version", "Which version is running. 1 for 'server_version' label with current version.", "server_version"),
		id:            d("etcd_server_id", "Server or member ID in hexadecimal format. 1 for 'server_id' label with current ID.", "server_id"),
		slowWatchers:  d("etcd_debugging_mvcc_slow_watcher_total", "Total number of unsynced slow watchers."),
		writeConflicts: d("kite_write_conflicts_total",
			"Write batches applied again after the storage aborted them for a concurrent writer's transaction (Galera certification conflicts between servers writing through different nodes)."),
	}
}

func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.hasLeader, c.isLeader, c.leaderChanges, c.committed, c.applied,
		c.pending, c.failed, c.dbSize, c.dbInUse, c.quotaBytes, c.keys, c.currentRev, c.compactRev, c.serverVersion, c.id,
		c.slowWatchers, c.writeConflicts} {
		ch <- d
	}
}

func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	st := c.hdr.status()
	gauge(c.hasLeader, b2f(st.Leader != 0))
	gauge(c.isLeader, b2f(st.Leader == c.hdr.memberID))
	// etcd declares committed and applied as gauges set to raft's indexes;
	// without raft the revision stands in for the index (header.status).
	gauge(c.committed, float64(st.Index))
	gauge(c.applied, float64(st.Applied))
	changes, pending, failed := c.hdr.cluster.proposals()
	counter(c.leaderChanges, float64(changes))
	gauge(c.pending, float64(pending))
	counter(c.failed, float64(failed))
	gauge(c.quotaBytes, float64(max(c.quota, 0)))
	gauge(c.serverVersion, 1, version.Version)
	gauge(c.id, 1, strconv.FormatUint(c.hdr.memberID, 16))
	cur, compacted := c.store.Revisions()
	gauge(c.currentRev, float64(cur))
	gauge(c.compactRev, float64(compacted))
	gauge(c.slowWatchers, float64(c.store.SlowWatchers()))
	counter(c.writeConflicts, float64(c.store.WriteConflicts()))
	ctx, cancel := context.WithTimeout(context.Background(), metricsTimeout)
	defer cancel()
	// On a failed query its metrics are left out of this scrape rather
	// than reported as 0, which would look like an empty database.
	if size, inUse, err := c.store.Backend().Size(ctx); err == nil {
		gauge(c.dbSize, float64(size))
		gauge(c.dbInUse, float64(inUse))
	}
	if n, err := c.keyCount(ctx); err == nil {
		gauge(c.keys, float64(n))
	}
}

// keyCount is etcd's keys_total, the live keys. etcd keeps it in memory
// with its index; kite's index is in the database, so it is counted there
// (a count of the live-key index, no values read), locally: a scrape must
// not go through raft.
func (c *storeCollector) keyCount(ctx context.Context) (int64, error) {
	resp, err := c.store.Range(ctx, &pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, CountOnly: true, Serializable: true})
	if err != nil {
		return 0, err
	}
	return resp.Count, nil
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
