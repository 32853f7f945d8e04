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

// listenStater is a backend that follows other servers' commits: over a
// LISTEN connection (postgres), or over wake-up connections (mysql).
type listenStater interface {
	ListenStats() (received, reconnects int64, queued int)
}

// listenCollector exports the LISTEN connection under kite_ names: how
// much of the other servers' work this one hears of, whether the
// connection is stable, and whether the Store keeps up.
type listenCollector struct {
	l                            listenStater
	received, reconnects, queued *prometheus.Desc
}

func newListenCollector(l listenStater) *listenCollector {
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, nil) }
	return &listenCollector{l: l,
		received:   d("kite_db_notifications_received_total", "Commit notifications of the other kite servers received (the LISTEN connection on Postgres, the wake-up connections on MySQL)."),
		reconnects: d("kite_db_listen_reconnects_total", "Times the LISTEN connection (Postgres) or a wake-up connection (MySQL) was lost and made again (each followed by a full resync)."),
		queued:     d("kite_db_notifications_queued", "Notifications received and not yet taken by the store."),
	}
}

func (c *listenCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.received
	ch <- c.reconnects
	ch <- c.queued
}

func (c *listenCollector) Collect(ch chan<- prometheus.Metric) {
	received, reconnects, queued := c.l.ListenStats()
	ch <- prometheus.MustNewConstMetric(c.received, prometheus.CounterValue, float64(received))
	ch <- prometheus.MustNewConstMetric(c.reconnects, prometheus.CounterValue, float64(reconnects))
	ch <- prometheus.MustNewConstMetric(c.queued, prometheus.GaugeValue, float64(queued))
}

// wakeStater is a backend whose servers wake each other over connections
// of their own (mysql), with a poll of the database as the fallback while
// one of them is unreachable.
type wakeStater interface {
	WakeStats() (polls int64, degraded bool, peers int)
}

// wakeCollector exports the wake-ups: a degraded gauge at 1, or polls
// rising, mean watch events reach this server up to a second late.
type wakeCollector struct {
	w                      wakeStater
	polls, degraded, peers *prometheus.Desc
}

func newWakeCollector(w wakeStater) *wakeCollector {
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, nil) }
	return &wakeCollector{w: w,
		polls:    d("kite_db_wake_polls_total", "Reads of the current revision made because another live kite server could not be reached for wake-ups."),
		degraded: d("kite_db_wake_degraded", "1 while a live kite server of the database cannot be reached for wake-ups (this server then polls every second)."),
		peers:    d("kite_db_wake_peers", "Kite servers of the database this one has a wake-up connection with."),
	}
}

func (c *wakeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.polls
	ch <- c.degraded
	ch <- c.peers
}

func (c *wakeCollector) Collect(ch chan<- prometheus.Metric) {
	polls, degraded, peers := c.w.WakeStats()
	d := 0.0
	if degraded {
		d = 1
	}
	ch <- prometheus.MustNewConstMetric(c.polls, prometheus.CounterValue, float64(polls))
	ch <- prometheus.MustNewConstMetric(c.degraded, prometheus.GaugeValue, d)
	ch <- prometheus.MustNewConstMetric(c.peers, prometheus.GaugeValue, float64(peers))
}
