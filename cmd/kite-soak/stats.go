package main

import (
	"log/slog"
	"sync"
	"time"

	"github.com/kite-db/kite/internal/latency"
)

// soakStats gathers one server's latencies, compaction windows and errors
// from every driver; each sample takes what accumulated since the last.
type soakStats struct {
	name string
	log  *slog.Logger

	mu      sync.Mutex
	writes  latency.Histogram // since the last sample
	lists   latency.Histogram // since the last sample
	windows []compactWindow
	taken   int // windows already reported by a sample
	// outside is the longest write that overlapped no compaction window:
	// the run's baseline, so that a compaction's pause can be told from
	// what an ordinary slow fsync costs on the same machine.
	outside  time.Duration
	errors   int64
	firstErr string
	revision int64 // the highest revision a write was acknowledged at
}

// compactWindow is the time around one compaction during which a write's
// latency counts as its pause: from the Compact call until --compact-window
// after it returned (end is zero while the call runs).
type compactWindow struct {
	start, end time.Time
	pause      time.Duration // the longest write that overlapped it
	took       time.Duration // the Compact call itself
}

// intervalStats is what one sample takes from soakStats.
type intervalStats struct {
	writes      uint64
	writeP99    time.Duration
	lists       uint64
	listP99     time.Duration
	compactions int // windows that closed in the interval
	pause, took time.Duration
	errors      int64
	revision    int64
}

func newSoakStats(name string, log *slog.Logger) *soakStats {
	return &soakStats{name: name, log: log}
}

// write records a write that ran from t0 to t1 and was acknowledged at rev.
func (s *soakStats) write(t0, t1 time.Time, rev int64) {
	d := t1.Sub(t0)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes.Record(d)
	s.revision = max(s.revision, rev)
	// Compactions run one at a time, minutes apart: only the last window
	// can overlap a write that just ended.
	if n := len(s.windows); n > 0 {
		w := &s.windows[n-1]
		if !t1.Before(w.start) && (w.end.IsZero() || !t0.After(w.end)) {
			w.pause = max(w.pause, d)
			return
		}
	}
	s.outside = max(s.outside, d)
}

// list records one full paginated list.
func (s *soakStats) list(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lists.Record(d)
}

// fail counts an error; the first few are logged, the first is kept.
func (s *soakStats) fail(what string, err error) {
	s.mu.Lock()
	s.errors++
	n := s.errors
	if n == 1 {
		s.firstErr = what + ": " + err.Error()
	}
	s.mu.Unlock()
	if n <= 5 {
		s.log.Warn("soak error", "server", s.name, "what", what, "error", err)
	}
}

func (s *soakStats) openWindow(start time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.windows = append(s.windows, compactWindow{start: start})
}

func (s *soakStats) closeWindow(end time.Time, took time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := &s.windows[len(s.windows)-1]
	w.end, w.took = end, took
}

// take returns what accumulated since the last call and starts afresh.
// A compaction window is reported by the first sample after it closed.
func (s *soakStats) take(now time.Time) intervalStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := intervalStats{
		writes:   s.writes.Count(),
		writeP99: s.writes.Percentile(0.99),
		lists:    s.lists.Count(),
		listP99:  s.lists.Percentile(0.99),
		errors:   s.errors,
		revision: s.revision,
	}
	s.writes, s.lists = latency.Histogram{}, latency.Histogram{}
	for ; s.taken < len(s.windows); s.taken++ {
		w := s.windows[s.taken]
		if w.end.IsZero() || w.end.After(now) {
			break
		}
		st.compactions++
		st.pause, st.took = max(st.pause, w.pause), max(st.took, w.took)
	}
	return st
}

// totals are the run's compactions and longest pause (a write that
// overlapped a window after its sample was taken still counts here), the
// longest write outside every window, its errors and the first of them.
func (s *soakStats) totals() (compactions int, pause, outside time.Duration, errors int64, firstErr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.windows {
		pause = max(pause, w.pause)
	}
	return len(s.windows), pause, s.outside, s.errors, s.firstErr
}
