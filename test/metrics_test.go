package test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// etcdMetrics are the metrics a single etcd member exports that etcd's
// dashboards and alerts use; kite must export each with etcd's type and
// label keys.
var etcdMetrics = []string{
	"etcd_server_has_leader",
	"etcd_server_is_leader",
	"etcd_server_leader_changes_seen_total",
	"etcd_server_proposals_committed_total",
	"etcd_server_proposals_applied_total",
	"etcd_server_proposals_pending",
	"etcd_server_proposals_failed_total",
	"etcd_server_quota_backend_bytes",
	"etcd_server_version",
	"etcd_server_id",
	"etcd_disk_wal_fsync_duration_seconds",
	"etcd_disk_backend_commit_duration_seconds",
	"etcd_mvcc_db_total_size_in_bytes",
	"etcd_mvcc_db_total_size_in_use_in_bytes",
	"etcd_debugging_mvcc_keys_total",
	"etcd_debugging_mvcc_current_revision",
	"etcd_debugging_mvcc_compact_revision",
	"etcd_mvcc_put_total",
	"etcd_mvcc_delete_total",
	"etcd_mvcc_txn_total",
	"etcd_mvcc_range_total",
	"etcd_debugging_mvcc_watch_stream_total",
	"etcd_debugging_mvcc_watcher_total",
	"etcd_debugging_mvcc_slow_watcher_total",
	"etcd_network_client_grpc_received_bytes_total",
	"etcd_network_client_grpc_sent_bytes_total",
	"grpc_server_started_total",
	"grpc_server_handled_total",
	"grpc_server_msg_received_total",
	"grpc_server_msg_sent_total",
}

// raftPeerMetrics are rafthttp's, exported by a member with peers.
var raftPeerMetrics = []string{
	"etcd_network_peer_round_trip_time_seconds",
	"etcd_network_peer_sent_bytes_total",
	"etcd_network_peer_received_bytes_total",
	"etcd_network_active_peers",
}

// TestMetrics runs one workload on kite and on etcd and compares their
// /metrics: etcd's names with etcd's types, label keys and buckets, and
// counters that moved as etcd's did. kite is scraped on its
// --listen-metrics-urls listener, etcd on its client port.
func TestMetrics(t *testing.T) {
	metricsPort := freePort(t)
	kiteMetrics := "http://127.0.0.1:" + strconv.Itoa(metricsPort)
	k := startKite(t, "--listen-metrics-urls", kiteMetrics)
	e := startEtcd(t)
	etcdMetricsURL := fmt.Sprintf("http://127.0.0.1:%d", e.clientPort)
	if againstEtcd {
		kiteMetrics = etcdMetricsURL
	}

	kBefore, eBefore := scrape(t, kiteMetrics), scrape(t, etcdMetricsURL)
	kWatch, eWatch := metricsWorkload(t, k.Client, kiteMetrics), metricsWorkload(t, e.Client, etcdMetricsURL)
	kAfter, eAfter := scrape(t, kiteMetrics), scrape(t, etcdMetricsURL)

	for _, name := range etcdMetrics {
		em, km := eAfter[name], kAfter[name]
		if em == nil {
			t.Errorf("%s: etcd does not export it (the list is wrong)", name)
			continue
		}
		if km == nil {
			t.Errorf("%s: missing on kite", name)
			continue
		}
		if em.GetType() != km.GetType() {
			t.Errorf("%s: type %v on kite, %v on etcd", name, km.GetType(), em.GetType())
		}
		if ek, kk := labelKeys(em), labelKeys(km); !slices.Equal(ek, kk) {
			t.Errorf("%s: label keys %v on kite, %v on etcd", name, kk, ek)
		}
		if em.GetType() == dto.MetricType_HISTOGRAM {
			if eb, kb := buckets(em), buckets(km); !slices.Equal(eb, kb) {
				t.Errorf("%s: buckets %v on kite, %v on etcd", name, kb, eb)
			}
		}
	}

	// The workload's operations, counted by etcd's rules (compares and
	// prev_kv reads are ranges; an mvcc txn of more than one op is a txn).
	want := map[string]float64{
		"etcd_mvcc_put_total":    10,
		"etcd_mvcc_range_total":  9,
		"etcd_mvcc_delete_total": 2,
		"etcd_mvcc_txn_total":    4,
	}
	for name, n := range want {
		if d := value(eAfter, name) - value(eBefore, name); d != n {
			t.Errorf("etcd: %s grew by %v, want %v (the test's arithmetic is wrong)", name, d, n)
		}
		if d := value(kAfter, name) - value(kBefore, name); d != n {
			t.Errorf("kite: %s grew by %v, want %v as etcd", name, d, n)
		}
	}
	for _, m := range []struct {
		name string
		v    float64
	}{
		{"etcd_server_has_leader", 1},
		{"etcd_debugging_mvcc_keys_total", 7},
		{"etcd_server_proposals_failed_total", 0},
		{"etcd_server_proposals_pending", 0},
	} {
		// etcd's metrics live in its packages' process-wide registry,
		// which every embedded etcd of this test process has moved: only
		// the gauge of the running one is etcd's own answer here.
		if got := value(eAfter, m.name); got != m.v && m.name == "etcd_server_has_leader" {
			t.Errorf("etcd: %s = %v, want %v", m.name, got, m.v)
		}
		if got := value(kAfter, m.name); got != m.v {
			t.Errorf("kite: %s = %v, want %v", m.name, got, m.v)
		}
	}
	if datastore == "raftsql" || datastore == "raftsql-restored" {
		// A member of a 3-member cluster: it saw at least the first
		// election, and may or may not lead.
		if got := value(kAfter, "etcd_server_leader_changes_seen_total"); got < 1 {
			t.Errorf("kite: leader_changes_seen_total = %v, want >= 1", got)
		}
	} else {
		// A single member elects itself once, as a single etcd (whose
		// counter, process-wide, also holds the earlier embedded etcds').
		if got := value(kAfter, "etcd_server_leader_changes_seen_total"); got != 1 {
			t.Errorf("kite: leader_changes_seen_total = %v, want 1", got)
		}
		if got := value(eAfter, "etcd_server_leader_changes_seen_total"); got < 1 {
			t.Errorf("etcd: leader_changes_seen_total = %v, want >= 1", got)
		}
		for who, ms := range map[string]map[string]*dto.MetricFamily{"etcd": eAfter, "kite": kAfter} {
			if got := value(ms, "etcd_server_is_leader"); got != 1 {
				t.Errorf("%s: is_leader = %v, want 1", who, got)
			}
		}
	}
	for _, name := range []string{"etcd_server_proposals_committed_total", "etcd_server_proposals_applied_total",
		"etcd_network_client_grpc_received_bytes_total", "etcd_network_client_grpc_sent_bytes_total"} {
		if d := value(kAfter, name) - value(kBefore, name); d < 10 {
			t.Errorf("kite: %s grew by %v over 16 writes", name, d)
		}
	}
	// The writes were fsynced in a WAL and reach the database in a commit:
	// at least one of each. The backend commit may come later than the
	// answers, as etcd's does: raftsql applies behind its WAL and commits
	// into SQLite every 100 ms, as etcd commits bbolt, so it is waited for
	// (a few seconds at most), not expected by the time the writes return.
	for _, name := range []string{"etcd_disk_backend_commit_duration_seconds", "etcd_disk_wal_fsync_duration_seconds"} {
		d := histCount(kAfter, name) - histCount(kBefore, name)
		for deadline := time.Now().Add(5 * time.Second); d < 1 && time.Now().Before(deadline); {
			time.Sleep(50 * time.Millisecond)
			d = histCount(scrape(t, kiteMetrics), name) - histCount(kBefore, name)
		}
		if d < 1 {
			t.Errorf("kite: %s observed %d commits in the 5 s after the workload", name, d)
		}
	}
	if got := value(kAfter, "etcd_mvcc_db_total_size_in_bytes"); got <= 0 {
		t.Errorf("kite: db_total_size_in_bytes = %v", got)
	}
	// With one watch open, both count one stream and one watcher.
	for _, name := range []string{"etcd_debugging_mvcc_watch_stream_total", "etcd_debugging_mvcc_watcher_total"} {
		if kw, ew := value(kWatch, name), value(eWatch, name); kw != ew || kw != 1 {
			t.Errorf("%s with one watch open: kite %v, etcd %v, want 1", name, kw, ew)
		}
	}
	if value(kAfter, "etcd_debugging_mvcc_watcher_total") != 0 {
		waitMetric(t, kiteMetrics, "etcd_debugging_mvcc_watcher_total", 0)
	}
	// grpc_server_handled_total carries the method and code.
	if got := sampleValue(kAfter, "grpc_server_handled_total", map[string]string{
		"grpc_method": "Put", "grpc_service": "etcdserverpb.KV", "grpc_code": "OK", "grpc_type": "unary"}); got < 7 {
		t.Errorf("kite: grpc_server_handled_total{Put,OK} = %v, want >= 7", got)
	}

	if datastore == "raftsql" || datastore == "raftsql-restored" {
		// rafthttp's metrics, from the default registry; the round trip
		// is measured by its prober every few seconds.
		deadline := time.Now().Add(20 * time.Second)
		for {
			ms := scrape(t, kiteMetrics)
			missing := ""
			for _, name := range raftPeerMetrics {
				if ms[name] == nil {
					missing = name
				}
			}
			if missing == "" && histCount(ms, "etcd_network_peer_round_trip_time_seconds") > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("kite in raftsql mode: %s missing or no round trip observed", missing)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}

	if datastore == "postgres" {
		if got := value(kAfter, "kite_db_pool_acquires_total") - value(kBefore, "kite_db_pool_acquires_total"); got < 1 {
			t.Errorf("kite on postgres: kite_db_pool_acquires_total grew by %v during the workload", got)
		}
		for _, name := range []string{"kite_db_notifications_received_total", "kite_db_listen_reconnects_total", "kite_db_notifications_queued"} {
			if _, ok := kAfter[name]; !ok {
				t.Errorf("kite on postgres: %s not exported", name)
			}
		}
	}

	// The metrics listener also answers the probes.
	for _, path := range []string{"/health", "/livez", "/readyz"} {
		resp, err := http.Get(kiteMetrics + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s on the metrics url: %d %s", path, resp.StatusCode, body)
		}
	}
}

// metricsWorkload runs the same operations on c: 10 puts, 9 ranges, 2
// deletes and 4 multi-op mvcc txns by etcd's count, a lease and a watch.
// It returns a scrape taken while the watch is open.
func metricsWorkload(t *testing.T, c *clientv3.Client, metricsURL string) map[string]*dto.MetricFamily {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 { // 5 puts
		must(c.Put(ctx, fmt.Sprintf("m/k%d", i), "v"))
	}
	must(c.Put(ctx, "m/k0", "v", clientv3.WithPrevKV()))                          // put + range, a txn
	must(c.Get(ctx, "m/k0"))                                                      // range
	must(c.Get(ctx, "m/", clientv3.WithPrefix()))                                 // range
	must(c.Get(ctx, "m/k3", clientv3.WithSerializable()))                         // range
	must(c.Delete(ctx, "m/k1"))                                                   // delete
	must(c.Delete(ctx, "m/k2", clientv3.WithPrevKV()))                            // delete + range, a txn
	tr, err := c.Txn(ctx).If(clientv3.Compare(clientv3.Value("m/k0"), "=", "v")). // compare: range
											Then(clientv3.OpPut("m/k5", "v"), clientv3.OpGet("m/k3")).Commit() // put + range, a txn
	must(tr, err)
	if !tr.Succeeded {
		t.Fatal("txn 1 did not succeed")
	}
	tr, err = c.Txn(ctx).If(clientv3.Compare(clientv3.Version("m/k3"), ">", 0), // 2 compares, a txn
		clientv3.Compare(clientv3.Version("m/k4"), ">", 0)).
		Then(clientv3.OpPut("m/k6", "v")).Commit() // put
	must(tr, err)
	if !tr.Succeeded {
		t.Fatal("txn 2 did not succeed")
	}
	l, err := c.Grant(ctx, 60)
	must(l, err)
	must(c.Put(ctx, "m/k7", "v", clientv3.WithLease(l.ID))) // put

	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	wc := c.Watch(wctx, "m/w", clientv3.WithCreatedNotify())
	if wr := <-wc; !wr.Created {
		t.Fatalf("watch not created: %v", wr.Err())
	}
	must(c.Put(ctx, "m/w", "v")) // put
	if wr := <-wc; len(wr.Events) != 1 {
		t.Fatalf("watch: %v", wr.Err())
	}
	during := scrape(t, metricsURL)
	wcancel()
	return during
}

// scrape reads /metrics at base.
func scrape(t *testing.T, base string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatalf("scrape %s: %v", base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: %s", base, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse %s/metrics: %v", base, err)
	}
	return mfs
}

// waitMetric polls until name has value v (a gauge that follows a stream
// closing in the background).
func waitMetric(t *testing.T, base, name string, v float64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := value(scrape(t, base), name)
		if got == v {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s = %v, want %v", name, got, v)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// labelKeys is the sorted union of a family's label names.
func labelKeys(mf *dto.MetricFamily) []string {
	var keys []string
	for _, m := range mf.GetMetric() {
		for _, l := range m.GetLabel() {
			if !slices.Contains(keys, l.GetName()) {
				keys = append(keys, l.GetName())
			}
		}
	}
	slices.Sort(keys)
	return keys
}

func buckets(mf *dto.MetricFamily) []float64 {
	if len(mf.GetMetric()) == 0 {
		return nil
	}
	var out []float64
	for _, b := range mf.GetMetric()[0].GetHistogram().GetBucket() {
		out = append(out, b.GetUpperBound())
	}
	return out
}

// value is the sum of a counter's or gauge's samples (0 if absent).
func value(ms map[string]*dto.MetricFamily, name string) float64 {
	var v float64
	for _, m := range ms[name].GetMetric() {
		v += m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue()
	}
	return v
}

// sampleValue is the value of the sample of name with exactly labels.
func sampleValue(ms map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	for _, m := range ms[name].GetMetric() {
		ok := len(m.GetLabel()) == len(labels)
		for _, l := range m.GetLabel() {
			ok = ok && labels[l.GetName()] == l.GetValue()
		}
		if ok {
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

func histCount(ms map[string]*dto.MetricFamily, name string) uint64 {
	var n uint64
	for _, m := range ms[name].GetMetric() {
		n += m.GetHistogram().GetSampleCount()
	}
	return n
}
