package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/kite-db/kite/internal/latency"
	"github.com/kite-db/kite/internal/testenv"
)

// result is one workload measured on one target; it is also the schema of
// the JSON lines (one object per line, nothing before the brace).
type result struct {
	Workload   string  `json:"workload"`
	Target     string  `json:"target"`
	Clients    int     `json:"clients"`
	Ops        int64   `json:"ops"`
	Seconds    float64 `json:"seconds"`
	OpsPerSec  float64 `json:"ops_per_sec"`
	P50ms      float64 `json:"p50_ms"`
	P90ms      float64 `json:"p90_ms"`
	P99ms      float64 `json:"p99_ms"`
	MaxMs      float64 `json:"max_ms"`
	Errors     int64   `json:"errors"`
	Missed     int64   `json:"missed"`
	Duplicates int64   `json:"duplicates"`
	// RSSBytes is the server's resident memory after the workload, when the
	// server is a process this run started (--compare); with several
	// servers on one database, or the members of a raft cluster, their sum
	// (the database server not counted). In the peak-rss row it is the
	// peak (VmHWM) over the run, of the largest server: peaks of several
	// processes need not coincide, so they are not summed.
	RSSBytes int64 `json:"rss_bytes,omitempty"`
	// RSSNodesBytes is, with several servers or members, each one's
	// resident memory (in the order of their names, kite-0, kite-1, ...),
	// and RSSMaxBytes the largest: a raft member holds the whole store, so
	// the largest member is what one machine of the cluster must hold.
	RSSNodesBytes []int64 `json:"rss_nodes_bytes,omitempty"`
	RSSMaxBytes   int64   `json:"rss_max_bytes,omitempty"`
	// FirstError is the first failed operation's error, when errors > 0.
	FirstError string `json:"first_error,omitempty"`
	// NotServed: a partial reference (kine) did not serve the workload;
	// Note says why ("unsupported by kine: ..." or "failed on kine: ...").
	NotServed bool `json:"not_served,omitempty"`
	// Note qualifies the row ("unsupported by kine: ...", or a watch-remote
	// on one server, where writer and watchers share it).
	Note string `json:"note,omitempty"`
	// Failover is the failover workload's per-round measurements; its
	// latency columns are the times from the kill until a write succeeded.
	Failover *failoverStats `json:"failover,omitempty"`
	// cost is what the servers spent on the workload (cost.go).
	cost
}

// setRSS records the resident memory of a target's servers: their sum,
// and with more than one, each and the largest.
func (r *result) setRSS(nodes []int64) {
	r.RSSBytes, r.RSSNodesBytes, r.RSSMaxBytes = 0, nil, 0
	for _, n := range nodes {
		r.RSSBytes += n
		r.RSSMaxBytes = max(r.RSSMaxBytes, n)
	}
	if len(nodes) > 1 {
		r.RSSNodesBytes = nodes
	} else {
		r.RSSMaxBytes = 0 // the same as RSSBytes
	}
}

func newResult(target string, s spec, ops int64, elapsed time.Duration, h *latency.Histogram, errs int64) result {
	r := result{
		Workload: s.label,
		Target:   target,
		Clients:  s.clients,
		Ops:      ops,
		Seconds:  testenv.Round3(elapsed.Seconds()),
		P50ms:    testenv.Round3(latency.Ms(h.Percentile(0.50))),
		P90ms:    testenv.Round3(latency.Ms(h.Percentile(0.90))),
		P99ms:    testenv.Round3(latency.Ms(h.Percentile(0.99))),
		MaxMs:    testenv.Round3(latency.Ms(h.Max())),
		Errors:   errs,
	}
	if elapsed > 0 {
		r.OpsPerSec = testenv.Round3(float64(ops) / elapsed.Seconds())
	}
	return r
}

// writeJSONLine writes r as one line of JSON.
func writeJSONLine(w io.Writer, r result) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode result: %w", err)
	}
	if _, err := w.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("write result: %w", err)
	}
	return nil
}

// writeTable prints every result as a readable table, then the notes of
// the rows that have one.
func writeTable(w io.Writer, results []result) error {
	tw := testenv.NewTable(w)
	tw.Rowf("target\tworkload\tclients\tops\tseconds\tops/s\tp50 ms\tp90 ms\tp99 ms\tmax ms\terrors\tmissed\tdups\tRSS MiB")
	var notes []string
	for _, r := range results {
		switch {
		case r.NotServed:
			tw.Rowf("%s\t%s\t%d\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-", r.Target, r.Workload, r.Clients)
		case memoryOnly(r):
			tw.Rowf("%s\t%s\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t%s", r.Target, r.Workload, testenv.MiB(r.RSSBytes))
		default:
			tw.Rowf("%s\t%s\t%d\t%d\t%.2f\t%.0f\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s",
				r.Target, r.Workload, r.Clients, r.Ops, r.Seconds, r.OpsPerSec,
				msCell(r, r.P50ms), msCell(r, r.P90ms), msCell(r, r.P99ms), msCell(r, r.MaxMs),
				r.Errors, r.Missed, r.Duplicates, testenv.MiB(r.RSSBytes))
		}
		switch {
		case r.Note != "":
			notes = append(notes, fmt.Sprintf("%s/%s: %s", r.Target, r.Workload, r.Note))
		case r.Errors > 0 && r.FirstError != "":
			notes = append(notes, fmt.Sprintf("%s/%s: %d errors, the first: %s", r.Target, r.Workload, r.Errors, r.FirstError))
		}
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	for _, n := range notes {
		if _, err := fmt.Fprintln(w, "  "+n); err != nil {
			return fmt.Errorf("write table: %w", err)
		}
	}
	return nil
}

// writeRatios prints, per workload, num's numbers over den's (kite over
// etcd, kite over kine): a throughput ratio above 1 and a latency or
// memory ratio below 1 favour num.
func writeRatios(w io.Writer, results []result, num, den string) error {
	byKey := make(map[[2]string]result, len(results))
	var order []string
	for _, r := range results {
		if _, seen := byKey[[2]string{den, r.Workload}]; !seen && r.Target == den {
			order = append(order, r.Workload)
		}
		byKey[[2]string{r.Target, r.Workload}] = r
	}
	tw := testenv.NewTable(w)
	tw.Rowf("workload\t%[1]s ops/s\t%[2]s ops/s\tthroughput %[2]s/%[1]s\t%[1]s p50 ms\t%[2]s p50 ms\tp50 %[2]s/%[1]s\t%[1]s p99 ms\t%[2]s p99 ms\tp99 %[2]s/%[1]s\t%[1]s RSS MiB\t%[2]s RSS MiB\tRSS %[2]s/%[1]s\t%[1]s errors/missed/dups\t%[2]s errors/missed/dups", den, num)
	var notes []string
	for _, wl := range order {
		d, n := byKey[[2]string{den, wl}], byKey[[2]string{num, wl}]
		if memoryOnly(d) {
			tw.Rowf("%s\t-\t-\t-\t-\t-\t-\t-\t-\t-\t%s\t%s\t%s\t-\t-",
				wl, testenv.MiB(d.RSSBytes), testenv.MiB(n.RSSBytes), testenv.Ratio(float64(n.RSSBytes), float64(d.RSSBytes)))
			continue
		}
		if d.NotServed {
			tw.Rowf("%s\t-\t%.0f\t-\t-\t%s\t-\t-\t%s\t-\t-\t%s\t-\t-\t%d/%d/%d",
				wl, n.OpsPerSec, msCell(n, n.P50ms), msCell(n, n.P99ms), testenv.MiB(n.RSSBytes), n.Errors, n.Missed, n.Duplicates)
			notes = append(notes, fmt.Sprintf("%s: %s", wl, d.Note))
			continue
		}
		tw.Rowf("%s\t%.0f\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d/%d/%d\t%d/%d/%d",
			wl, d.OpsPerSec, n.OpsPerSec, testenv.Ratio(n.OpsPerSec, d.OpsPerSec),
			msCell(d, d.P50ms), msCell(n, n.P50ms), testenv.Ratio(n.P50ms, d.P50ms),
			msCell(d, d.P99ms), msCell(n, n.P99ms), testenv.Ratio(n.P99ms, d.P99ms),
			testenv.MiB(d.RSSBytes), testenv.MiB(n.RSSBytes), testenv.Ratio(float64(n.RSSBytes), float64(d.RSSBytes)),
			d.Errors, d.Missed, d.Duplicates, n.Errors, n.Missed, n.Duplicates)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write ratios: %w", err)
	}
	for _, n := range notes {
		if _, err := fmt.Fprintln(w, "  "+n); err != nil {
			return fmt.Errorf("write ratios: %w", err)
		}
	}
	return nil
}

// memoryOnly reports whether a row is a memory reading and nothing else
// (peak-rss): no operations, no time.
func memoryOnly(r result) bool {
	return r.Ops == 0 && r.Seconds == 0 && r.RSSBytes > 0 && !r.NotServed
}

// msCell formats a latency, or "-" for a row that measured none (the
// memory and load rows time only their preload, peak-rss nothing).
func msCell(r result, v float64) string {
	if r.MaxMs == 0 {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', 3, 64)
}

// hasNodeRSS reports whether any result has per-server memory.
func hasNodeRSS(results []result) bool {
	for _, r := range results {
		if len(r.RSSNodesBytes) > 0 {
			return true
		}
	}
	return false
}

// writeNodeRSS prints, per workload, the resident memory of each server of
// den and of num (raft members, or servers sharing a database) and the
// ratio of their largest: the main tables show the sum, which hides
// whether one member (the leader, say) holds far more than the others.
func writeNodeRSS(w io.Writer, results []result, num, den string) error {
	byKey := make(map[[2]string]result, len(results))
	var order []string
	for _, r := range results {
		if _, seen := byKey[[2]string{den, r.Workload}]; !seen && r.Target == den {
			order = append(order, r.Workload)
		}
		byKey[[2]string{r.Target, r.Workload}] = r
	}
	fmt.Fprintln(w, "resident memory per server, MiB (in the order "+den+"-0, "+den+"-1, ...)")
	tw := testenv.NewTable(w)
	tw.Rowf("workload\t%[1]s per server\t%[1]s max\t%[2]s per server\t%[2]s max\tmax %[2]s/%[1]s", den, num)
	for _, wl := range order {
		d, n := byKey[[2]string{den, wl}], byKey[[2]string{num, wl}]
		tw.Rowf("%s\t%s\t%s\t%s\t%s\t%s", wl,
			nodeList(d), testenv.MiB(maxRSS(d)), nodeList(n), testenv.MiB(maxRSS(n)),
			testenv.Ratio(float64(maxRSS(n)), float64(maxRSS(d))))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write memory per server: %w", err)
	}
	return nil
}

// maxRSS is the resident memory of a row's largest server.
func maxRSS(r result) int64 {
	if len(r.RSSNodesBytes) == 0 {
		return r.RSSBytes
	}
	return r.RSSMaxBytes
}

// nodeList is "41.2 / 40.9 / 43.0", or the one server's memory.
func nodeList(r result) string {
	if len(r.RSSNodesBytes) == 0 {
		return testenv.MiB(r.RSSBytes)
	}
	parts := make([]string, len(r.RSSNodesBytes))
	for i, b := range r.RSSNodesBytes {
		parts[i] = testenv.MiB(b)
	}
	return strings.Join(parts, " / ")
}
