package test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"text/template"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.yaml.in/yaml/v2"
)

// The files of deploy/monitoring, relative to this package's directory
// (where go test runs it).
const (
	alertsFile    = "../deploy/monitoring/kite-alerts.yaml"
	dashboardFile = "../deploy/monitoring/kite-dashboard.json"
)

// etcdMixinAlerts are the alerts of etcd's mixin (contrib/mixin) that
// kite-alerts.yaml keeps, by name. etcdGRPCRequestsSlow is not among them:
// it needs grpc_server_handling_seconds, which kite does not export.
var etcdMixinAlerts = []string{
	"etcdMembersDown",
	"etcdInsufficientMembers",
	"etcdNoLeader",
	"etcdHighNumberOfLeaderChanges",
	"etcdHighNumberOfFailedGRPCRequests",
	"etcdMemberCommunicationSlow",
	"etcdHighNumberOfFailedProposals",
	"etcdHighFsyncDurations",
	"etcdHighCommitDurations",
	"etcdDatabaseQuotaLowSpace",
	"etcdExcessiveDatabaseGrowth",
	"etcdDatabaseHighFragmentationRatio",
}

// TestMonitoring checks deploy/monitoring against kite: the alerting rules
// and the Grafana dashboard are well formed, and every metric their
// queries name is on the /metrics of a running kite in the storage modes
// that export it (docs/monitoring.md): etcd_network_peer_* and the other
// rafthttp families in raftsql mode only, kite_db_pool_* in postgres mode
// only, everything else in every mode.
func TestMonitoring(t *testing.T) {
	var exprs []promExpr
	exprs = append(exprs, checkAlerts(t, alertsFile)...)
	exprs = append(exprs, checkDashboard(t, dashboardFile)...)
	if t.Failed() {
		return
	}
	// Every metric name, with the queries that use it.
	refs := map[string][]string{}
	for _, e := range exprs {
		for _, s := range e.selectors {
			if !slices.Contains(refs[s.name], e.where) {
				refs[s.name] = append(refs[s.name], e.where)
			}
		}
	}
	names := make([]string, 0, len(refs))
	for n := range refs {
		names = append(names, n)
	}
	slices.Sort(names)
	t.Logf("%d queries name %d metrics: %s", len(exprs), len(names), strings.Join(names, " "))

	k := startKite(t)
	monitoringTraffic(t, k.Client)
	mode := monitoringMode()
	// rafthttp's round-trip histogram appears once its prober has measured
	// a peer (every few seconds), its failure counters once a send to a
	// peer failed: in raftsql mode, poll while only rafthttp's metrics are
	// missing, and stop the other members when only the failure counters
	// are. Everything else is there once the traffic is done.
	deadline, stopped := time.Now().Add(30*time.Second), false
	for {
		problems := checkExported(refs, scrape(t, k.Endpoint), mode)
		if len(problems) == 0 {
			return
		}
		onlyIn := func(names func(string) bool) bool {
			return !slices.ContainsFunc(problems, func(p exportProblem) bool { return !names(p.name) })
		}
		late := mode == "raftsql" && onlyIn(func(n string) bool { return metricMode(n) == "raftsql" })
		if !late || time.Now().After(deadline) {
			for _, p := range problems {
				if late || mode != "raftsql" || metricMode(p.name) != "raftsql" { // not one still to come
					t.Errorf("kite in %s mode: %s", mode, p)
				}
			}
			return
		}
		if !stopped && onlyIn(func(n string) bool { return slices.Contains(peerFailureMetrics, n) }) {
			stopRaftPeers(t, k)
			deadline, stopped = time.Now().Add(30*time.Second), true
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// peerFailureMetrics are rafthttp's counters of send failures, labelled
// by peer: a raftsql member has no series of them until a send to a peer
// failed.
var peerFailureMetrics = []string{"etcd_network_peer_sent_failures_total"}

// stopRaftPeers kills (SIGKILL) the two other members of k's raftsql
// cluster, which the harness (raftPeers) started as children of this
// process and whose cleanup reaps them: k then campaigns, and its votes
// to them fail. They are told by their --initial-cluster-token, k's.
func stopRaftPeers(t *testing.T, k *kiteProcess) {
	t.Helper()
	token := flagValue(k.flags, "--initial-cluster-token")
	if token == "" || k.proc == nil {
		t.Fatalf("not a raftsql member: %v", k.flags)
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var killed []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == k.proc.Pid() {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) < 2 || f[1] != strconv.Itoa(os.Getpid()) {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		if flagValue(args, "--initial-cluster-token") != token || flagValue(args, "--name") == "t" {
			continue
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("kill raft peer %d: %v", pid, err)
		}
		killed = append(killed, pid)
	}
	if len(killed) != 2 {
		t.Fatalf("stopped raft peers %v, want the 2 other members", killed)
	}
	t.Logf("stopped the other raft members (%v) for the peer failure metrics", killed)
}

// flagValue is the value of the last "--flag value" in args.
func flagValue(args []string, flag string) string {
	v := ""
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			v = args[i+1]
		} else if after, ok := strings.CutPrefix(a, flag+"="); ok {
			v = after
		}
	}
	return v
}

// monitoringMode is the storage mode of the kites the tests start, as the
// metrics documentation names them ("etcd" with KITE_TEST_AGAINST_ETCD=1:
// a single etcd member, which has neither peers nor a pool).
func monitoringMode() string {
	switch {
	case againstEtcd:
		return "etcd"
	case datastore == "raftsql-restored":
		return "raftsql"
	}
	return datastore
}

// monitoringTraffic does a little of what a cluster sees: writes, a read,
// a watch that receives an event, a lease kept alive.
func monitoringTraffic(t *testing.T, c *clientv3.Client) {
	t.Helper()
	ctx := testCtx(t, 30*time.Second)
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	wc := c.Watch(wctx, "mon/", clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	if wr := <-wc; !wr.Created {
		t.Fatalf("watch not created: %v", wr.Err())
	}
	if _, err := c.Put(ctx, "mon/a", "v"); err != nil {
		t.Fatal(err)
	}
	if wr := <-wc; len(wr.Events) != 1 {
		t.Fatalf("watch: %v", wr.Err())
	}
	if _, err := c.Get(ctx, "mon/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	l, err := c.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.KeepAliveOnce(ctx, l.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Delete(ctx, "mon/a"); err != nil {
		t.Fatal(err)
	}
}

// TestMonitoringNames checks checkExported, the heart of TestMonitoring,
// on a made-up /metrics: a name kite does not export is reported, in the
// modes that should have it.
func TestMonitoringNames(t *testing.T) {
	counter, gauge, hist := dto.MetricType_COUNTER, dto.MetricType_GAUGE, dto.MetricType_HISTOGRAM
	mfs := map[string]*dto.MetricFamily{}
	for name, typ := range map[string]dto.MetricType{
		"etcd_server_has_leader":               gauge,
		"grpc_server_handled_total":            counter,
		"etcd_disk_wal_fsync_duration_seconds": hist,
		"kite_db_pool_idle_connections":        gauge,
	} {
		mfs[name] = &dto.MetricFamily{Name: &name, Type: &typ}
	}
	for _, tt := range []struct {
		name, mode string
		ok         bool
	}{
		{"etcd_server_has_leader", "sqlite", true},
		{"grpc_server_handled_total", "raftsql", true},
		{"etcd_disk_wal_fsync_duration_seconds_bucket", "sqlite", true},
		{"etcd_disk_wal_fsync_duration_seconds_count", "postgres", true},
		{"etcd_disk_wal_fsync_duration_seconds", "sqlite", false}, // a histogram has no such series
		{"etcd_server_has_leader_bucket", "sqlite", false},        // not a histogram
		{"grpc_server_handling_seconds_bucket", "sqlite", false},  // etcd's, not kite's
		{"etcd_server_made_up_total", "postgres", false},
		{"kite_db_pool_idle_connections", "postgres", true},
		{"kite_db_pool_made_up", "postgres", false},
		{"kite_db_pool_made_up", "sqlite", true}, // postgres only: not looked for
		{"etcd_network_peer_sent_bytes_total", "raftsql", false},
		{"etcd_network_peer_sent_bytes_total", "postgres", true},
		{"etcd_disk_wal_write_bytes_total", "raftsql", false},
		{"up", "sqlite", true}, // Prometheus' own
	} {
		problems := checkExported(map[string][]string{tt.name: {"test"}}, mfs, tt.mode)
		if ok := len(problems) == 0; ok != tt.ok {
			t.Errorf("%s in %s mode: ok = %v, want %v (%v)", tt.name, tt.mode, ok, tt.ok, problems)
		}
	}
}

// TestMonitoringPromQL checks the tokenizer that finds the metric names of
// a PromQL expression.
func TestMonitoringPromQL(t *testing.T) {
	for _, tt := range []struct {
		expr  string
		names []string // nil: the expression is refused
	}{
		{`up`, []string{"up"}},
		{`sum by (instance, le) (rate(a_bucket{job="$job", le!="x"}[$__rate_interval]))`, []string{"a_bucket"}},
		{`sum(rate(a{job="kite", grpc_code=~"Unknown|b_total"}[5m])) without (grpc_type, grpc_code) / sum(b) > 1`, []string{"a", "b"}},
		{`increase((max without (instance) (a) or 0*absent(a{job="kite"}))[15m:1m]) >= 4`, []string{"a", "a"}},
		{`predict_linear(a[4h], 4*60*60) > (b > 0) and on (job) c offset 5m`, []string{"a", "b", "c"}},
		{`a == bool 0 unless ignoring(x) group_left(y) b`, []string{"a", "b"}},
		{`{__name__="a", job="kite"} + 1e-3 + 0x1f + Inf + NaN`, []string{"a"}},
		{`label_replace(a, "dst", "$1", "src", "(.*)") # a comment naming c`, []string{"a"}},
		{`topk(5, a) @ start()`, []string{"a"}},
		{`histogram_quantile(0.99, sum(rate(a_bucket[5m])) by (le))`, []string{"a_bucket"}},
		{`recorded:rule:rate5m{job="kite"}`, []string{"recorded:rule:rate5m"}},
		{`made_up_function(a)`, nil},
		{`sum(a`, nil},
		{`a{job="kite"`, nil},
		{`a{job="kite}`, nil},
		{`{__name__=~"etcd_.*"}`, nil},
		{`{job="kite"}`, nil},
		{`sum by job (a)`, nil},
		{`a{job}`, nil},
	} {
		sels, err := promqlSelectors(tt.expr)
		if tt.names == nil {
			if err == nil {
				t.Errorf("%s: accepted (%v), want an error", tt.expr, sels)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.expr, err)
			continue
		}
		var got []string
		for _, s := range sels {
			got = append(got, s.name)
		}
		if !slices.Equal(got, tt.names) {
			t.Errorf("%s: names %v, want %v", tt.expr, got, tt.names)
		}
	}
	for _, tt := range []struct{ query, expr string }{
		{`label_values(etcd_server_has_leader, job)`, `etcd_server_has_leader`},
		{`label_values(a{job="$job", x=~"a,b"}, instance)`, `a{job="$job", x=~"a,b"}`},
		{`label_values(job)`, ``},
		{`query_result(sum(a) by (job))`, `sum(a) by (job)`},
	} {
		got, err := variableExpr(tt.query)
		if err != nil || got != tt.expr {
			t.Errorf("variableExpr(%s) = %q, %v; want %q", tt.query, got, err, tt.expr)
		}
	}
}

// promExpr is one PromQL expression of deploy/monitoring and its
// selectors.
type promExpr struct {
	where     string // "alert etcdNoLeader", "panel \"Keys\" target A"
	expr      string
	selectors []selector
}

// parseExpr tokenizes expr for checks and reports a refused one.
func parseExpr(t *testing.T, where, expr string) (promExpr, bool) {
	t.Helper()
	sels, err := promqlSelectors(expr)
	if err != nil {
		t.Errorf("%s: %v in %q", where, err, expr)
		return promExpr{}, false
	}
	if len(sels) == 0 {
		t.Errorf("%s: no metric in %q", where, expr)
		return promExpr{}, false
	}
	return promExpr{where: where, expr: expr, selectors: sels}, true
}

// The rule file, strictly: a misspelt key (`annotation:`) is an error.
type ruleFile struct {
	Groups []struct {
		Name     string `yaml:"name"`
		Interval string `yaml:"interval"`
		Rules    []struct {
			Alert         string            `yaml:"alert"`
			Record        string            `yaml:"record"`
			Expr          string            `yaml:"expr"`
			For           string            `yaml:"for"`
			KeepFiringFor string            `yaml:"keep_firing_for"`
			Labels        map[string]string `yaml:"labels"`
			Annotations   map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// alertsJobMatcher is the job selector every rule of kite-alerts.yaml
// carries (its header says how to change it).
var alertsJobMatcher = matcher{"job", "=", "kite"}

// checkAlerts checks the rule file's structure and returns its
// expressions.
func checkAlerts(t *testing.T, path string) []promExpr {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.UnmarshalStrict(b, &rf); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(rf.Groups) == 0 {
		t.Fatalf("%s: no groups", path)
	}
	var exprs []promExpr
	seen := map[string]bool{}
	groups := map[string]bool{}
	for _, g := range rf.Groups {
		if g.Name == "" || groups[g.Name] {
			t.Errorf("%s: group name %q empty or repeated", path, g.Name)
		}
		groups[g.Name] = true
		if len(g.Rules) == 0 {
			t.Errorf("%s: group %s has no rules", path, g.Name)
		}
		for i, r := range g.Rules {
			where := fmt.Sprintf("%s: group %s rule %d (%s)", path, g.Name, i, r.Alert)
			if r.Alert == "" || r.Record != "" {
				t.Errorf("%s: want an alerting rule (alert, no record)", where)
				continue
			}
			seen[r.Alert] = true
			if d, err := model.ParseDuration(r.For); err != nil || d <= 0 {
				t.Errorf("%s: for %q: want a duration (%v)", where, r.For, err)
			}
			if s := r.Labels["severity"]; s != "critical" && s != "warning" && s != "info" {
				t.Errorf("%s: labels.severity %q: want critical, warning or info", where, s)
			}
			for _, a := range []string{"description", "summary"} {
				text := r.Annotations[a]
				if strings.TrimSpace(text) == "" {
					t.Errorf("%s: annotations.%s missing", where, a)
					continue
				}
				if err := parseAlertTemplate(text); err != nil {
					t.Errorf("%s: annotations.%s: %v", where, a, err)
				}
			}
			e, ok := parseExpr(t, where, r.Expr)
			if !ok {
				continue
			}
			for _, s := range e.selectors {
				if !slices.Contains(s.matchers, alertsJobMatcher) {
					t.Errorf("%s: %s without the job selector %s", where, s.name, alertsJobMatcher)
				}
			}
			exprs = append(exprs, e)
		}
	}
	for _, a := range etcdMixinAlerts {
		if !seen[a] {
			t.Errorf("%s: etcd-mixin's alert %s missing", path, a)
		}
	}
	return exprs
}

// parseAlertTemplate parses an annotation as Prometheus does (Go's
// text/template, with $labels and $value defined and Prometheus'
// functions), without running it.
func parseAlertTemplate(text string) error {
	funcs := template.FuncMap{}
	for _, f := range []string{"query", "first", "label", "value", "strvalue", "args", "reReplaceAll", "safeHtml",
		"match", "title", "toUpper", "toLower", "graphLink", "tableLink", "sortByLabel", "humanize", "humanize1024",
		"humanizeDuration", "humanizePercentage", "humanizeTimestamp", "pathPrefix", "externalURL", "parseDuration",
		"stripPort", "stripDomain", "toTime", "toDuration", "now", "urlQueryEscape"} {
		funcs[f] = func(...any) any { return nil }
	}
	const defs = "{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$externalURL := .ExternalURL}}{{$value := .Value}}"
	_, err := template.New("annotation").Funcs(funcs).Option("missingkey=zero").Parse(defs + text)
	return err
}

// The parts of a Grafana dashboard the checks read.
type dashboard struct {
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Datasource *datasourceRef  `json:"datasource"`
			Query      json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int            `json:"id"`
	Type       string         `json:"type"`
	Title      string         `json:"title"`
	Datasource *datasourceRef `json:"datasource"`
	GridPos    *struct {
		X, Y, W, H int
	} `json:"gridPos"`
	Targets []struct {
		Datasource *datasourceRef `json:"datasource"`
		Expr       string         `json:"expr"`
		RefID      string         `json:"refId"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// dashboardDatasource is what every panel and variable queries: the
// dashboard's datasource variable.
var dashboardDatasource = datasourceRef{Type: "prometheus", UID: "${datasource}"}

// The matchers every panel query carries: the dashboard's job and
// instance variables.
var dashboardMatchers = []matcher{{"job", "=", "$job"}, {"instance", "=~", "$instance"}}

// checkDashboard checks the dashboard's structure and returns its
// expressions: the panels' queries and the template variables'.
func checkDashboard(t *testing.T, path string) []promExpr {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if dec.More() {
		t.Fatalf("%s: data after the dashboard", path)
	}
	if d.UID == "" || d.Title == "" || d.SchemaVersion < 36 {
		t.Errorf("%s: uid %q, title %q, schemaVersion %d: want a uid, a title and schemaVersion >= 36", path, d.UID, d.Title, d.SchemaVersion)
	}
	var exprs []promExpr

	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
		where := fmt.Sprintf("%s: variable %s", path, v.Name)
		var q string
		if err := json.Unmarshal(v.Query, &q); err != nil {
			var obj struct {
				Query string `json:"query"`
			}
			if err := json.Unmarshal(v.Query, &obj); err != nil {
				t.Errorf("%s: query %s: want a string or {query}", where, v.Query)
				continue
			}
			q = obj.Query
		}
		switch v.Type {
		case "datasource":
			if q != "prometheus" {
				t.Errorf("%s: datasource variable of type %q, want prometheus", where, q)
			}
		case "query":
			if v.Datasource == nil || *v.Datasource != dashboardDatasource {
				t.Errorf("%s: datasource %v, want %v", where, v.Datasource, dashboardDatasource)
			}
			expr, err := variableExpr(q)
			if err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			if expr == "" {
				continue
			}
			if e, ok := parseExpr(t, where, expr); ok {
				exprs = append(exprs, e)
			}
		}
	}
	for name, typ := range map[string]string{"datasource": "datasource", "job": "query", "instance": "query"} {
		if vars[name] != typ {
			t.Errorf("%s: variable %s of type %q, want %q", path, name, vars[name], typ)
		}
	}

	ids := map[int]bool{}
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			where := fmt.Sprintf("%s: panel %d %q", path, p.ID, p.Title)
			if p.ID == 0 || ids[p.ID] {
				t.Errorf("%s: id missing or repeated", where)
			}
			ids[p.ID] = true
			if p.Title == "" || p.GridPos == nil || p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
				t.Errorf("%s: want a title and a gridPos inside the 24 columns", where)
			}
			if p.Type == "row" {
				if len(p.Targets) > 0 {
					t.Errorf("%s: a row with queries", where)
				}
				walk(p.Panels)
				continue
			}
			if len(p.Panels) > 0 {
				t.Errorf("%s: panels inside a %s", where, p.Type)
			}
			if p.Datasource == nil || *p.Datasource != dashboardDatasource {
				t.Errorf("%s: datasource %v, want %v", where, p.Datasource, dashboardDatasource)
			}
			if len(p.Targets) == 0 {
				t.Errorf("%s: no targets", where)
			}
			refIDs := map[string]bool{}
			for _, tg := range p.Targets {
				where := where + " target " + tg.RefID
				if tg.RefID == "" || refIDs[tg.RefID] {
					t.Errorf("%s: refId missing or repeated", where)
				}
				refIDs[tg.RefID] = true
				if tg.Datasource != nil && *tg.Datasource != dashboardDatasource {
					t.Errorf("%s: datasource %v, want %v", where, tg.Datasource, dashboardDatasource)
				}
				e, ok := parseExpr(t, where, tg.Expr)
				if !ok {
					continue
				}
				for _, s := range e.selectors {
					for _, m := range dashboardMatchers {
						if !slices.Contains(s.matchers, m) {
							t.Errorf("%s: %s without %s", where, s.name, m)
						}
					}
				}
				exprs = append(exprs, e)
			}
		}
	}
	walk(d.Panels)
	if len(ids) == 0 {
		t.Errorf("%s: no panels", path)
	}
	return exprs
}

// variableExpr is the PromQL expression of a Grafana variable query
// (Prometheus data source): label_values(expr, label) and
// query_result(expr) have one; label_values(label) and label_names() none.
func variableExpr(q string) (string, error) {
	q = strings.TrimSpace(q)
	inner, ok := strings.CutPrefix(q, "label_values(")
	if ok && strings.HasSuffix(inner, ")") {
		inner = inner[:len(inner)-1]
		if c := lastTopLevelComma(inner); c >= 0 {
			return strings.TrimSpace(inner[:c]), nil
		}
		return "", nil
	}
	inner, ok = strings.CutPrefix(q, "query_result(")
	if ok && strings.HasSuffix(inner, ")") {
		return strings.TrimSpace(inner[:len(inner)-1]), nil
	}
	if q == "label_names()" {
		return "", nil
	}
	return "", fmt.Errorf("variable query %q: want label_values(...), query_result(...) or label_names()", q)
}

// lastTopLevelComma is the index of the last comma of s outside
// parentheses, braces and strings, or -1.
func lastTopLevelComma(s string) int {
	last, depth := -1, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '"', '\'', '`':
			j, err := skipString(s, i)
			if err != nil {
				return -1
			}
			i = j - 1
		case '(', '{', '[':
			depth++
		case ')', '}', ']':
			depth--
		case ',':
			if depth == 0 {
				last = i
			}
		}
	}
	return last
}

// raftsqlOnly and postgresOnly are the metric families docs/monitoring.md
// documents for one storage mode (prefixes); the rest are in every mode.
var (
	raftsqlOnly = []string{"etcd_network_peer_", "etcd_network_active_peers", "etcd_network_disconnected_peers_total",
		"etcd_network_snapshot_", "etcd_disk_wal_write_", "etcd_snap_", "etcd_debugging_snap_"}
	postgresOnly = []string{"kite_db_pool_"}
	// prometheusOwn are the series Prometheus makes for each target it
	// scrapes: no server exports them.
	prometheusOwn = []string{"up"}
)

// metricMode is the storage mode that exports name ("" for all, "prometheus"
// for Prometheus' own series).
func metricMode(name string) string {
	hasPrefix := func(prefixes []string) bool {
		return slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(name, p) })
	}
	switch {
	case slices.Contains(prometheusOwn, name):
		return "prometheus"
	case hasPrefix(raftsqlOnly):
		return "raftsql"
	case hasPrefix(postgresOnly):
		return "postgres"
	}
	return ""
}

// An exportProblem is a metric a query uses that kite does not export.
type exportProblem struct{ name, where, msg string }

func (p exportProblem) String() string {
	return fmt.Sprintf("%s (used by %s) %s", p.name, p.where, p.msg)
}

// checkExported returns what is wrong with refs (metric name -> where it
// is used) against a scrape of a kite in mode: names of that mode (or of
// every mode) that the scrape lacks. A histogram's series are
// name_bucket, name_sum and name_count; its family's name alone is no
// series.
func checkExported(refs map[string][]string, mfs map[string]*dto.MetricFamily, mode string) []exportProblem {
	var problems []exportProblem
	for name, where := range refs {
		if m := metricMode(name); m == "prometheus" || (m != "" && m != mode) {
			continue
		}
		if msg := exportedAs(mfs, name); msg != "" {
			problems = append(problems, exportProblem{name, strings.Join(where, "; "), msg})
		}
	}
	slices.SortFunc(problems, func(a, b exportProblem) int { return strings.Compare(a.name, b.name) })
	return problems
}

// exportedAs returns "" if /metrics has series named name, or why not.
func exportedAs(mfs map[string]*dto.MetricFamily, name string) string {
	if mf := mfs[name]; mf != nil {
		switch mf.GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM, dto.MetricType_SUMMARY:
			return fmt.Sprintf("is a %v family: its series are %s_bucket, _sum and _count", mf.GetType(), name)
		}
		return ""
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if !ok {
			continue
		}
		switch mfs[base].GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			if mfs[base] != nil {
				return ""
			}
		case dto.MetricType_SUMMARY:
			if mfs[base] != nil && suffix != "_bucket" {
				return ""
			}
		}
	}
	return "is not exported"
}

// A selector is a metric name and its label matchers.
type selector struct {
	name     string
	matchers []matcher
}

type matcher struct{ label, op, value string }

func (m matcher) String() string { return fmt.Sprintf("%s%s%q", m.label, m.op, m.value) }

// PromQL's functions, aggregations and keywords: identifiers that are
// not metric names.
var (
	promqlFunctions = setOf("abs", "absent", "absent_over_time", "acos", "acosh", "asin", "asinh", "atan", "atanh",
		"avg_over_time", "ceil", "changes", "clamp", "clamp_max", "clamp_min", "cos", "cosh", "count_over_time",
		"day_of_month", "day_of_week", "day_of_year", "days_in_month", "deg", "delta", "deriv",
		"double_exponential_smoothing", "exp", "floor", "histogram_avg", "histogram_count", "histogram_fraction",
		"histogram_quantile", "histogram_stddev", "histogram_stdvar", "histogram_sum", "holt_winters", "hour",
		"idelta", "increase", "info", "irate", "label_join", "label_replace", "last_over_time", "ln", "log10", "log2",
		"mad_over_time", "max_over_time", "min_over_time", "minute", "month", "pi", "predict_linear",
		"present_over_time", "quantile_over_time", "rad", "rate", "resets", "round", "scalar", "sgn", "sin", "sinh",
		"sort", "sort_by_label", "sort_by_label_desc", "sort_desc", "sqrt", "stddev_over_time", "stdvar_over_time",
		"sum_over_time", "tan", "tanh", "time", "timestamp", "vector", "year",
		// the @ modifier's preprocessors
		"start", "end")
	promqlAggregations = setOf("sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
		"bottomk", "topk", "quantile", "limitk", "limit_ratio")
	// promqlLabelLists are followed by a parenthesized list of label names.
	promqlLabelLists = setOf("by", "without", "on", "ignoring", "group_left", "group_right")
	promqlKeywords   = setOf("and", "or", "unless", "bool", "offset", "atan2", "inf", "nan")
)

func setOf(words ...string) map[string]bool {
	m := make(map[string]bool, len(words))
	for _, w := range words {
		m[w] = true
	}
	return m
}

// promqlSelectors returns the selectors of a PromQL expression in order:
// every identifier that is not a function, an aggregation, a keyword, a
// label name (in {...} or a by/without/on/ignoring/group_x list), a
// duration or a number, or inside a string; {__name__="x"} names x.
// Grafana's variables ($job, ${x}, $__rate_interval) are skipped. It
// refuses what it cannot read: an unknown function, unbalanced brackets,
// an unterminated string, a selector whose name is a regex.
func promqlSelectors(expr string) ([]selector, error) {
	var out []selector
	depth := 0
	n := len(expr)
	for i := 0; i < n; {
		c := expr[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#': // a comment, to the end of the line
			for i < n && expr[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			j, err := skipString(expr, i)
			if err != nil {
				return nil, err
			}
			i = j
		case c == '$':
			i = skipVariable(expr, i)
		case c == '{': // a selector with its name in __name__
			ms, j, err := parseMatchers(expr, i)
			if err != nil {
				return nil, err
			}
			name := ""
			for _, m := range ms {
				if m.label == "__name__" {
					if m.op != "=" {
						return nil, fmt.Errorf("metric name %s: cannot be checked", m)
					}
					name = m.value
				}
			}
			if name == "" {
				return nil, fmt.Errorf("selector %s without a metric name", expr[i:j])
			}
			out = append(out, selector{name: name, matchers: ms})
			i = j
		case c == '[': // a range or a subquery's range and step
			j := strings.IndexByte(expr[i:], ']')
			if j < 0 {
				return nil, fmt.Errorf("unclosed [ at %d", i)
			}
			if strings.TrimSpace(expr[i+1:i+j]) == "" || strings.ContainsAny(expr[i+1:i+j], "[({\"'") {
				return nil, fmt.Errorf("range %s: want a duration", expr[i:i+j+1])
			}
			i += j + 1
		case c == '(':
			depth++
			i++
		case c == ')':
			if depth--; depth < 0 {
				return nil, fmt.Errorf("unbalanced ) at %d", i)
			}
			i++
		case isDigit(c) || (c == '.' && i+1 < n && isDigit(expr[i+1])):
			i = skipNumber(expr, i)
		case isIdentStart(c):
			j := i
			for j < n && isIdentChar(expr[j]) {
				j++
			}
			word, lower := expr[i:j], strings.ToLower(expr[i:j])
			k := j
			for k < n && strings.IndexByte(" \t\r\n", expr[k]) >= 0 {
				k++
			}
			paren := k < n && expr[k] == '('
			switch {
			case promqlLabelLists[lower]:
				if paren {
					end, err := skipLabelList(expr, k)
					if err != nil {
						return nil, err
					}
					i = end
				} else if lower == "group_left" || lower == "group_right" {
					i = j
				} else {
					return nil, fmt.Errorf("%s without a label list at %d", word, i)
				}
				continue
			case promqlKeywords[lower]:
				i = j
				continue
			case promqlAggregations[word] && aggregationModifierAt(expr, k):
				i = j // sum by (x) (...)
				continue
			case paren:
				if !promqlFunctions[word] && !promqlAggregations[word] {
					return nil, fmt.Errorf("unknown function %s", word)
				}
				i = j
				continue
			}
			sel := selector{name: word}
			if k < n && expr[k] == '{' {
				ms, end, err := parseMatchers(expr, k)
				if err != nil {
					return nil, err
				}
				for _, m := range ms {
					if m.label == "__name__" {
						return nil, fmt.Errorf("%s: a name and __name__", word)
					}
				}
				sel.matchers, j = ms, end
			}
			out = append(out, sel)
			i = j
		case strings.IndexByte("+-*/%^=!<>,@", c) >= 0:
			i++
		default:
			return nil, fmt.Errorf("unexpected %q at %d", c, i)
		}
	}
	if depth != 0 {
		return nil, fmt.Errorf("unbalanced (")
	}
	return out, nil
}

// aggregationModifierAt tells whether s[i:] starts with by or without, as
// an aggregation's modifier written before its argument.
func aggregationModifierAt(s string, i int) bool {
	j := i
	for j < len(s) && isIdentChar(s[j]) {
		j++
	}
	w := strings.ToLower(s[i:j])
	return w == "by" || w == "without"
}

// parseMatchers reads the label matchers of the {...} at s[i] and returns
// them and the index after the }.
func parseMatchers(s string, i int) ([]matcher, int, error) {
	var ms []matcher
	start := i
	i++ // {
	for {
		for i < len(s) && strings.IndexByte(" \t\r\n", s[i]) >= 0 {
			i++
		}
		if i >= len(s) {
			return nil, 0, fmt.Errorf("unclosed { at %d", start)
		}
		if s[i] == '}' {
			return ms, i + 1, nil
		}
		j := i
		for j < len(s) && isIdentChar(s[j]) && s[j] != ':' {
			j++
		}
		if j == i || !isIdentStart(s[i]) {
			return nil, 0, fmt.Errorf("matchers %s: want a label name at %d", s[start:min(j+1, len(s))], i)
		}
		label := s[i:j]
		i = j
		for i < len(s) && s[i] == ' ' {
			i++
		}
		op := ""
		for _, o := range []string{"=~", "!~", "!=", "="} {
			if strings.HasPrefix(s[i:], o) {
				op = o
				break
			}
		}
		if op == "" {
			return nil, 0, fmt.Errorf("matcher %s: want =, !=, =~ or !~", label)
		}
		i += len(op)
		for i < len(s) && s[i] == ' ' {
			i++
		}
		if i >= len(s) || strings.IndexByte("\"'`", s[i]) < 0 {
			return nil, 0, fmt.Errorf("matcher %s%s: want a string", label, op)
		}
		j, err := skipString(s, i)
		if err != nil {
			return nil, 0, err
		}
		value := s[i+1 : j-1]
		if s[i] != '`' {
			value = strings.ReplaceAll(value, `\\`, `\`)
		}
		ms = append(ms, matcher{label, op, value})
		i = j
		for i < len(s) && strings.IndexByte(" \t\r\n", s[i]) >= 0 {
			i++
		}
		if i < len(s) && s[i] == ',' {
			i++
		} else if i < len(s) && s[i] != '}' {
			return nil, 0, fmt.Errorf("matchers at %d: want , or }", i)
		}
	}
}

// skipString returns the index after the string literal at s[i].
func skipString(s string, i int) (int, error) {
	q := s[i]
	for j := i + 1; j < len(s); j++ {
		switch {
		case s[j] == '\\' && q != '`':
			j++
		case s[j] == q:
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("unterminated string at %d", i)
}

// skipVariable returns the index after the Grafana variable at s[i]:
// $name or ${name...}.
func skipVariable(s string, i int) int {
	if i+1 < len(s) && s[i+1] == '{' {
		if j := strings.IndexByte(s[i:], '}'); j > 0 {
			return i + j + 1
		}
		return len(s)
	}
	j := i + 1
	for j < len(s) && isIdentChar(s[j]) && s[j] != ':' {
		j++
	}
	return j
}

// skipLabelList returns the index after the (label, ...) at s[i].
func skipLabelList(s string, i int) (int, error) {
	j := strings.IndexByte(s[i:], ')')
	if j < 0 {
		return 0, fmt.Errorf("unclosed label list at %d", i)
	}
	for _, l := range strings.Split(s[i+1:i+j], ",") {
		l = strings.TrimSpace(l)
		if l == "" && j == 1 {
			continue // ()
		}
		if l == "" || !isIdentStart(l[0]) || strings.ContainsFunc(l, func(r rune) bool { return r > 127 || !isIdentChar(byte(r)) || r == ':' }) {
			return 0, fmt.Errorf("label list %s: want label names", s[i:i+j+1])
		}
	}
	return i + j + 1, nil
}

// skipNumber returns the index after the number or duration at s[i]
// (0.99, 1e-3, 0x1f, 5m, 1h30m).
func skipNumber(s string, i int) int {
	hex := strings.HasPrefix(strings.ToLower(s[i:]), "0x")
	j := i
	for j < len(s) {
		c := s[j]
		switch {
		case (isIdentChar(c) && c != ':') || c == '.':
			j++
		case (c == '+' || c == '-') && !hex && j > i && (s[j-1] == 'e' || s[j-1] == 'E') && j+1 < len(s) && isDigit(s[j+1]):
			j++
		default:
			return j
		}
	}
	return j
}

func isDigit(c byte) bool      { return c >= '0' && c <= '9' }
func isIdentStart(c byte) bool { return c == '_' || c == ':' || (c|0x20 >= 'a' && c|0x20 <= 'z') }
func isIdentChar(c byte) bool  { return isIdentStart(c) || isDigit(c) }
