package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"text/tabwriter"
	"time"
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
	// server is a process this run started (--compare).
	RSSBytes int64 `json:"rss_bytes,omitempty"`
}

func newResult(target string, s spec, ops int64, elapsed time.Duration, h *histogram, errs int64) result {
	r := result{
		Workload: s.label,
		Target:   target,
		Clients:  s.clients,
		Ops:      ops,
		Seconds:  round3(elapsed.Seconds()),
		P50ms:    round3(ms(h.percentile(0.50))),
		P90ms:    round3(ms(h.percentile(0.90))),
		P99ms:    round3(ms(h.percentile(0.99))),
		MaxMs:    round3(ms(h.maximum())),
		Errors:   errs,
	}
	if elapsed > 0 {
		r.OpsPerSec = round3(float64(ops) / elapsed.Seconds())
	}
	return r
}

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }

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

// writeTable prints every result as a readable table.
func writeTable(w io.Writer, results []result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\tworkload\tclients\tops\tseconds\tops/s\tp50 ms\tp90 ms\tp99 ms\tmax ms\terrors\tmissed\tdups\tRSS MiB\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.2f\t%.0f\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t\n",
			r.Target, r.Workload, r.Clients, r.Ops, r.Seconds, r.OpsPerSec,
			msCell(r, r.P50ms), msCell(r, r.P90ms), msCell(r, r.P99ms), msCell(r, r.MaxMs),
			r.Errors, r.Missed, r.Duplicates, mib(r.RSSBytes))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	return nil
}

// writeRatios prints, per workload, kite's numbers over etcd's: a
// throughput ratio above 1 and a latency or memory ratio below 1 favour kite.
func writeRatios(w io.Writer, results []result, kite, etcd string) error {
	byKey := make(map[[2]string]result, len(results))
	var order []string
	for _, r := range results {
		if _, seen := byKey[[2]string{etcd, r.Workload}]; !seen && r.Target == etcd {
			order = append(order, r.Workload)
		}
		byKey[[2]string{r.Target, r.Workload}] = r
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "workload\t%[1]s ops/s\t%[2]s ops/s\tthroughput %[2]s/%[1]s\tp50 %[2]s/%[1]s\t%[1]s p99 ms\t%[2]s p99 ms\tp99 %[2]s/%[1]s\t%[1]s RSS MiB\t%[2]s RSS MiB\tRSS %[2]s/%[1]s\t%[2]s errors/missed/dups\t\n", etcd, kite)
	for _, wl := range order {
		e, k := byKey[[2]string{etcd, wl}], byKey[[2]string{kite, wl}]
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d/%d/%d\t\n",
			wl, e.OpsPerSec, k.OpsPerSec, ratio(k.OpsPerSec, e.OpsPerSec), ratio(k.P50ms, e.P50ms),
			msCell(e, e.P99ms), msCell(k, k.P99ms), ratio(k.P99ms, e.P99ms),
			mib(e.RSSBytes), mib(k.RSSBytes), ratio(float64(k.RSSBytes), float64(e.RSSBytes)),
			k.Errors, k.Missed, k.Duplicates)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write ratios: %w", err)
	}
	return nil
}

// msCell formats a latency, or "-" for a row that measured none (the
// memory rows time only their preload).
func msCell(r result, v float64) string {
	if r.MaxMs == 0 {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', 3, 64)
}

func ratio(a, b float64) string {
	if a == 0 || b == 0 {
		return "-"
	}
	return strconv.FormatFloat(a/b, 'f', 2, 64) + "x"
}

func mib(b int64) string {
	if b == 0 {
		return "-"
	}
	return strconv.FormatFloat(float64(b)/(1<<20), 'f', 1, 64)
}
