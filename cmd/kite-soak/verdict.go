package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/kite-db/kite/internal/latency"
	"github.com/kite-db/kite/internal/testenv"
)

// compactPauseTarget is the longest write a compaction may cause. It is
// reported, not a pass criterion: on a shared machine one slow fsync can
// exceed it whatever the server does.
const compactPauseTarget = 50 * time.Millisecond

// walGrowthSlack is added to --growth-slack for the WAL: etcd's WAL grows
// in preallocated segments of 64 MiB (up to five kept, plus one spare),
// and kite trims its WAL to 64 MiB (journal_size_limit), so a WAL that
// filled one more segment has not grown without bound.
const walGrowthSlack = 64 << 20

// soakSummary is one server's whole run, and its verdict; summary.json
// holds one per server.
type soakSummary struct {
	Server               string  `json:"server"`
	Minutes              float64 `json:"minutes"`
	DBFinalBytes         int64   `json:"db_final_bytes"`
	DBMaxBytes           int64   `json:"db_max_bytes"`
	WALMaxBytes          int64   `json:"wal_max_bytes"`
	ListP99MaxMs         float64 `json:"list_p99_max_ms"`
	WriteP99MaxMs        float64 `json:"write_p99_max_ms"`
	Compactions          int     `json:"compactions"`
	CompactionPauseMaxMs float64 `json:"compaction_pause_max_ms"`
	PauseWithinTarget    bool    `json:"compaction_pause_within_50ms"`
	// WriteMaxOutsideMs is the longest write outside every compaction
	// window: what the machine and the server cost without a compaction.
	WriteMaxOutsideMs float64     `json:"write_max_outside_compactions_ms"`
	Watch             watchCounts `json:"watch"`
	Errors            int64       `json:"errors"`
	FirstError        string      `json:"first_error,omitempty"`
	RSSPeakBytes      int64       `json:"rss_peak_bytes"`
	DBGrowth          growthCheck `json:"db_growth"`
	WALGrowth         growthCheck `json:"wal_growth"`
	Pass              bool        `json:"pass"`
	Failures          []string    `json:"failures,omitempty"`
}

// growthCheck decides whether a size grew without bound: its largest
// value in the last third of the run against its value at the end of the
// first third (by then the compactions have reached their steady state:
// history kept is one to two compaction intervals). With the live set
// constant a bounded store stays within factor × that + slack.
type growthCheck struct {
	FirstThirdBytes   int64 `json:"first_third_bytes"`
	LastThirdMaxBytes int64 `json:"last_third_max_bytes"`
	LimitBytes        int64 `json:"limit_bytes"`
	Unbounded         bool  `json:"unbounded"`
}

func checkGrowth(samples []soakSample, size func(*soakSample) int64, runMinutes, factor float64, slack int64) growthCheck {
	var g growthCheck
	for i := range samples {
		s := &samples[i]
		if s.Minutes <= runMinutes/3 {
			g.FirstThirdBytes = size(s)
		}
		if s.Minutes >= 2*runMinutes/3 {
			g.LastThirdMaxBytes = max(g.LastThirdMaxBytes, size(s))
		}
	}
	g.LimitBytes = int64(factor*float64(g.FirstThirdBytes)) + slack
	g.Unbounded = g.LastThirdMaxBytes > g.LimitBytes
	return g
}

// summarize reduces a server's samples and final tallies to its summary
// and verdict. end is when the watchers had drained.
func summarize(cfg *soakConfig, s *soakServer, all []soakSample, end time.Time) soakSummary {
	var samples []soakSample
	for _, sm := range all {
		if sm.Server == s.name {
			samples = append(samples, sm)
		}
	}
	sum := soakSummary{Server: s.name, Watch: s.watch.counts(end, true)}
	for _, sm := range samples {
		sum.DBMaxBytes = max(sum.DBMaxBytes, sm.DBBytes)
		sum.WALMaxBytes = max(sum.WALMaxBytes, sm.WALBytes)
		sum.RSSPeakBytes = max(sum.RSSPeakBytes, sm.RSSBytes)
	}
	// The kernel's high-water mark also counts peaks between samples.
	if peak, err := s.proc.PeakRSS(); err == nil {
		sum.RSSPeakBytes = max(sum.RSSPeakBytes, peak)
	}
	if n := len(samples); n > 0 {
		sum.Minutes = samples[n-1].Minutes
		sum.DBFinalBytes = samples[n-1].DBBytes
	}
	sum.ListP99MaxMs = zeroNaN(seriesMax(samples, func(s *soakSample) (float64, bool) { return deref(s.ListP99ms) }))
	sum.WriteP99MaxMs = zeroNaN(seriesMax(samples, func(s *soakSample) (float64, bool) { return deref(s.WriteP99ms) }))
	compactions, pause, outside, errs, firstErr := s.stats.totals()
	sum.Compactions, sum.CompactionPauseMaxMs = compactions, testenv.Round3(latency.Ms(pause))
	sum.WriteMaxOutsideMs = testenv.Round3(latency.Ms(outside))
	sum.PauseWithinTarget = pause <= compactPauseTarget
	sum.Errors, sum.FirstError = errs, firstErr

	// The thirds are of the time the load ran (less than --duration if
	// interrupted); the last sample is taken at its end.
	runMinutes := sum.Minutes
	sum.DBGrowth = checkGrowth(samples, func(s *soakSample) int64 { return s.DBBytes }, runMinutes, cfg.growthFactor, cfg.growthSlack)
	sum.WALGrowth = checkGrowth(samples, func(s *soakSample) int64 { return s.WALBytes }, runMinutes, cfg.growthFactor, cfg.growthSlack+walGrowthSlack)

	sum.Minutes = testenv.Round3(sum.Minutes)

	w := sum.Watch
	for _, f := range []struct {
		bad  bool
		what string
	}{
		{w.Missed > 0, fmt.Sprintf("%d watch events missed", w.Missed)},
		{w.Duplicates > 0, fmt.Sprintf("%d watch events duplicated", w.Duplicates)},
		{w.OutOfOrder > 0, fmt.Sprintf("%d watch events out of revision order", w.OutOfOrder)},
		{w.Mismatched > 0, fmt.Sprintf("%d watch events not what was written at their revision", w.Mismatched)},
		{w.Unexpected > 0, fmt.Sprintf("%d watch events nobody wrote", w.Unexpected)},
		{w.Unexpired > 0, fmt.Sprintf("%d events not deleted %s after their lease's TTL", w.Unexpired, expiryGrace)},
		{sum.Errors > 0, fmt.Sprintf("%d errors, the first: %s", sum.Errors, sum.FirstError)},
		{sum.DBGrowth.Unbounded, "database grows without bound: " + sum.DBGrowth.String()},
		{sum.WALGrowth.Unbounded, "WAL grows without bound: " + sum.WALGrowth.String()},
		{compactions == 0, "no compaction ran (--duration shorter than twice --compact-interval)"},
	} {
		if f.bad {
			sum.Failures = append(sum.Failures, f.what)
		}
	}
	sum.Pass = len(sum.Failures) == 0
	return sum
}

func (g growthCheck) String() string {
	return fmt.Sprintf("%s MiB at the end of the first third, up to %s MiB in the last third (limit %s MiB)",
		testenv.MiB(g.FirstThirdBytes), testenv.MiB(g.LastThirdMaxBytes), testenv.MiB(g.LimitBytes))
}

func deref(v *float64) (float64, bool) {
	if v == nil {
		return 0, false
	}
	return *v, true
}

func zeroNaN(v float64) float64 {
	if math.IsNaN(v) {
		return 0
	}
	return v
}

func writeSummaryJSON(dir string, sums []soakSummary) error {
	b, err := json.MarshalIndent(sums, "", "  ")
	if err != nil {
		return fmt.Errorf("encode summary: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "summary.json"), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write summary.json: %w", err)
	}
	return nil
}

// writeSoakTable prints the summary table, then each server's verdict.
func writeSoakTable(w io.Writer, cfg *soakConfig, sums []soakSummary) error {
	tw := testenv.NewTable(w)
	tw.Rowf("server\tminutes\tdb final MiB\tdb max MiB\tWAL max MiB\tlist p99 max ms\twrite p99 max ms\tcompactions\tcompaction pause max ms\treceived\tmissed/dups/disordered\texpired events\terrors\tpeak RSS MiB\tverdict")
	for _, s := range sums {
		verdict := "PASS"
		if !s.Pass {
			verdict = "FAIL"
		}
		tw.Rowf("%s\t%.1f\t%s\t%s\t%s\t%.1f\t%.1f\t%d\t%.1f\t%d\t%d/%d/%d\t%d\t%d\t%s\t%s",
			s.Server, s.Minutes, testenv.MiB(s.DBFinalBytes), testenv.MiB(s.DBMaxBytes), testenv.MiB(s.WALMaxBytes),
			s.ListP99MaxMs, s.WriteP99MaxMs, s.Compactions, s.CompactionPauseMaxMs,
			s.Watch.Received, s.Watch.Missed, s.Watch.Duplicates, s.Watch.OutOfOrder+s.Watch.Mismatched,
			s.Watch.Expired, s.Errors, testenv.MiB(s.RSSPeakBytes), verdict)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write summary: %w", err)
	}
	var b strings.Builder
	for _, s := range sums {
		within := "within"
		if !s.PauseWithinTarget {
			within = "ABOVE"
		}
		fmt.Fprintf(&b, "%s: longest write during a compaction %.1f ms, %s the %s target (reported, not a failure); longest write outside compactions %.1f ms\n",
			s.Server, s.CompactionPauseMaxMs, within, compactPauseTarget, s.WriteMaxOutsideMs)
		fmt.Fprintf(&b, "%s: db %s; WAL %s; growth allowed: %.2f× + %s MiB (WAL + %d MiB)\n",
			s.Server, s.DBGrowth, s.WALGrowth, cfg.growthFactor, testenv.MiB(cfg.growthSlack), walGrowthSlack>>20)
		if s.Pass {
			fmt.Fprintf(&b, "%s: PASS\n", s.Server)
		} else {
			fmt.Fprintf(&b, "%s: FAIL: %s\n", s.Server, strings.Join(s.Failures, "; "))
		}
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("write summary: %w", err)
	}
	return nil
}
