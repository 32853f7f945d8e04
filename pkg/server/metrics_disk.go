package server

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// commitObserver is a backend that reports the duration of its database
// commits (the sqlite and postgres drivers, raftsql for its member's
// database). Declared here, by its consumer: the drivers know nothing of
// prometheus.
type commitObserver interface {
	ObserveCommits(observe func(time.Duration))
}

// diskBuckets are etcd's for both disk histograms: 1 ms to 8 s, doubling.
var diskBuckets = prometheus.ExponentialBuckets(0.001, 2, 14)

// newDiskMetrics registers etcd's etcd_disk_backend_commit_duration_seconds
// and wires it to the backend's commits. Where kite keeps no WAL of its
// own (sqlite, postgres), the commit is also where the write-ahead log is
// made durable (SQLite's -wal fsync, Postgres' WAL flush before COMMIT
// returns), so etcd_disk_wal_fsync_duration_seconds observes the same
// commits; a raftsql member has etcd's WAL, whose package reports the real
// fsyncs itself (metrics_gather.go).
func newDiskMetrics(reg prometheus.Registerer, backend any, ownWAL bool) {
	commit := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "etcd_disk_backend_commit_duration_seconds",
		Help:    "The latency distributions of commit called by backend.",
		Buckets: diskBuckets,
	})
	reg.MustRegister(commit)
	observe := func(d time.Duration) { commit.Observe(d.Seconds()) }
	if !ownWAL {
		fsync := prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "etcd_disk_wal_fsync_duration_seconds",
			Help:    "The latency distributions of fsync called by WAL.",
			Buckets: diskBuckets,
		})
		reg.MustRegister(fsync)
		observe = func(d time.Duration) {
			commit.Observe(d.Seconds())
			fsync.Observe(d.Seconds())
		}
	}
	if o, ok := backend.(commitObserver); ok {
		o.ObserveCommits(observe)
	}
}
