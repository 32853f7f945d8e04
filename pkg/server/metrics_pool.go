package server

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// poolStater is a backend with a connection pool (postgres): its
// pgxpool statistics, as plain values so that pkg/server needs no driver.
type poolStater interface {
	PoolStats() (acquired, idle, total, maxConns int32, acquires, waited int64, waitTime time.Duration)
}

// poolCollector exports a database pool under kite_ names: etcd has no
// such pool, so there is no etcd name to keep.
type poolCollector struct {
	pool                                                    poolStater
	acquired, idle, total, maxConns, acquires, waited, wait *prometheus.Desc
}

func newPoolCollector(pool poolStater) *poolCollector {
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, nil) }
	return &poolCollector{
		pool:     pool,
		acquired: d("kite_db_pool_acquired_connections", "Connections of the database pool in use."),
		idle:     d("kite_db_pool_idle_connections", "Idle connections of the database pool."),
		total:    d("kite_db_pool_open_connections", "Open connections of the database pool."),
		maxConns: d("kite_db_pool_max_connections", "Maximum connections of the database pool."),
		acquires: d("kite_db_pool_acquires_total", "Connections acquired from the database pool."),
		waited:   d("kite_db_pool_acquires_waited_total", "Acquires that had to wait for a connection."),
		wait:     d("kite_db_pool_acquire_wait_seconds_total", "Total time spent acquiring connections from the database pool."),
	}
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.acquired, c.idle, c.total, c.maxConns, c.acquires, c.waited, c.wait} {
		ch <- d
	}
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	acquired, idle, total, maxConns, acquires, waited, wait := c.pool.PoolStats()
	g := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	cnt := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	g(c.acquired, float64(acquired))
	g(c.idle, float64(idle))
	g(c.total, float64(total))
	g(c.maxConns, float64(maxConns))
	cnt(c.acquires, float64(acquires))
	cnt(c.waited, float64(waited))
	cnt(c.wait, wait.Seconds())
}
