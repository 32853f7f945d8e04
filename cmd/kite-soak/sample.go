package main

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/kite-db/kite/internal/latency"

	"github.com/kite-db/kite/internal/testenv"
)

// soakSample is one server's measures at one moment; it is also the schema
// of samples.jsonl and, column for column, of samples.csv. Latencies are
// over the interval since the previous sample; null (an empty CSV cell)
// when nothing of the kind finished in it.
type soakSample struct {
	Minutes  float64 `json:"t_min"`
	Server   string  `json:"server"`
	DBBytes  int64   `json:"db_bytes"`
	WALBytes int64   `json:"wal_bytes"`
	Writes   int64   `json:"writes"`
	// WriteP99ms is over every write of the interval: objects, events,
	// node leases, lease grants, the compaction key.
	WriteP99ms *float64 `json:"write_p99_ms"`
	ListP99ms  *float64 `json:"list_p99_ms"`
	// CompactPauseMs is the longest write that overlapped a compaction
	// window closed in the interval; CompactMs the Compact call itself.
	CompactPauseMs *float64 `json:"compact_pause_ms"`
	CompactMs      *float64 `json:"compact_ms"`
	watchCounts
	Errors      int64 `json:"errors"`
	RSSBytes    int64 `json:"rss_bytes"`
	LiveObjects int64 `json:"live_objects"`
	Revision    int64 `json:"revision"`
}

// sampleColumns is samples.csv's columns, named as the JSON fields.
func sampleColumns() []struct {
	name string
	cell func(s *soakSample) string
} {
	i := func(v int64) string { return strconv.FormatInt(v, 10) }
	f := func(v *float64) string {
		if v == nil {
			return ""
		}
		return strconv.FormatFloat(*v, 'f', 3, 64)
	}
	type col = struct {
		name string
		cell func(s *soakSample) string
	}
	return []col{
		{"t_min", func(s *soakSample) string { return strconv.FormatFloat(s.Minutes, 'f', 3, 64) }},
		{"server", func(s *soakSample) string { return s.Server }},
		{"db_bytes", func(s *soakSample) string { return i(s.DBBytes) }},
		{"wal_bytes", func(s *soakSample) string { return i(s.WALBytes) }},
		{"writes", func(s *soakSample) string { return i(s.Writes) }},
		{"write_p99_ms", func(s *soakSample) string { return f(s.WriteP99ms) }},
		{"list_p99_ms", func(s *soakSample) string { return f(s.ListP99ms) }},
		{"compact_pause_ms", func(s *soakSample) string { return f(s.CompactPauseMs) }},
		{"compact_ms", func(s *soakSample) string { return f(s.CompactMs) }},
		{"received", func(s *soakSample) string { return i(s.Received) }},
		{"missed", func(s *soakSample) string { return i(s.Missed) }},
		{"duplicates", func(s *soakSample) string { return i(s.Duplicates) }},
		{"out_of_order", func(s *soakSample) string { return i(s.OutOfOrder) }},
		{"mismatched", func(s *soakSample) string { return i(s.Mismatched) }},
		{"unexpected", func(s *soakSample) string { return i(s.Unexpected) }},
		{"expired", func(s *soakSample) string { return i(s.Expired) }},
		{"unexpired", func(s *soakSample) string { return i(s.Unexpired) }},
		{"errors", func(s *soakSample) string { return i(s.Errors) }},
		{"rss_bytes", func(s *soakSample) string { return i(s.RSSBytes) }},
		{"live_objects", func(s *soakSample) string { return i(s.LiveObjects) }},
		{"revision", func(s *soakSample) string { return i(s.Revision) }},
	}
}

// sampleEvery samples every server at start, start+every, ... until the
// end of the load (the last sample is taken by the caller, after the
// watchers drained).
func sampleEvery(ctx context.Context, cfg *soakConfig, log *slog.Logger, servers []*soakServer, start time.Time, rec *sampleRecorder) {
	for k := 0; ; k++ {
		at := start.Add(time.Duration(k) * cfg.sampleEvery)
		if !at.Before(start.Add(cfg.duration)) {
			return
		}
		if wait := time.Until(at); wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
		now := time.Now()
		for _, s := range servers {
			if err := rec.add(takeSample(s, start, now, false, log)); err != nil {
				log.Error("write sample", "error", err)
			}
		}
	}
}

// takeSample measures s at now. A server that exited is counted as an
// error once and its drivers are stopped.
func takeSample(s *soakServer, start, now time.Time, final bool, log *slog.Logger) soakSample {
	p := s.proc
	if err := p.ExitErr(); err != nil {
		s.stats.fail("server", err)
		s.load.abort()
	}
	st := s.stats.take(now)
	sm := soakSample{
		Minutes:     now.Sub(start).Minutes(),
		Server:      s.name,
		Writes:      int64(st.writes),
		watchCounts: s.watch.counts(now, final),
		Errors:      st.errors,
		LiveObjects: s.load.live.Load(),
		Revision:    st.revision,
	}
	var err error
	if sm.DBBytes, sm.WALBytes, err = dataSizes(p.DataDir()); err != nil {
		log.Warn("sizes of the data files", "server", s.name, "error", err)
	}
	if rss, err := p.RSS(); err == nil {
		sm.RSSBytes = rss
	}
	if st.writes > 0 {
		sm.WriteP99ms = msPtr(st.writeP99)
	}
	if st.lists > 0 {
		sm.ListP99ms = msPtr(st.listP99)
	}
	if st.compactions > 0 {
		sm.CompactPauseMs, sm.CompactMs = msPtr(st.pause), msPtr(st.took)
	}
	log.Info("soak sample", "server", s.name, "t_min", testenv.Round3(sm.Minutes), "db_mib", testenv.MiB(sm.DBBytes), "wal_mib", testenv.MiB(sm.WALBytes),
		"write_p99_ms", testenv.Round3(latency.Ms(st.writeP99)), "writes", sm.Writes, "missed", sm.Missed, "errors", sm.Errors, "rss_mib", testenv.MiB(sm.RSSBytes))
	return sm
}

func msPtr(d time.Duration) *float64 {
	v := testenv.Round3(latency.Ms(d))
	return &v
}

// dataSizes returns the size of a server's database file and of its WAL:
// etcd's member/snap/db and the files of member/wal (64 MiB segments,
// preallocated), or kite's kite.db and kite.db-wal (pkg/datastore). A
// missing WAL file is size 0: SQLite removes it on a clean close.
func dataSizes(dataDir string) (db, wal int64, err error) {
	etcdDB := filepath.Join(dataDir, "member", "snap", "db")
	if st, err := os.Stat(etcdDB); err == nil {
		wal, err := dirSize(filepath.Join(dataDir, "member", "wal"))
		return st.Size(), wal, err
	}
	st, err := os.Stat(filepath.Join(dataDir, "kite.db"))
	if err != nil {
		return 0, 0, fmt.Errorf("no etcd or kite database in %s: %w", dataDir, err)
	}
	if w, err := os.Stat(filepath.Join(dataDir, "kite.db-wal")); err == nil {
		wal = w.Size()
	} else if !errors.Is(err, fs.ErrNotExist) {
		return st.Size(), 0, fmt.Errorf("stat kite.db-wal: %w", err)
	}
	return st.Size(), wal, nil
}

// dirSize is the total size of the regular files in dir.
func dirSize(dir string) (int64, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", dir, err)
	}
	var n int64
	for _, e := range entries {
		if info, err := e.Info(); err == nil && info.Mode().IsRegular() {
			n += info.Size()
		}
	}
	return n, nil
}

// sampleRecorder keeps every sample and writes each at once to
// samples.csv and samples.jsonl, so a run cut short leaves its data.
type sampleRecorder struct {
	samples []soakSample
	csvFile *os.File
	csv     *csv.Writer
	jsFile  *os.File
	js      *bufio.Writer
	closed  bool
}

func newSampleRecorder(dir string) (*sampleRecorder, error) {
	r := &sampleRecorder{}
	var err error
	if r.csvFile, err = os.Create(filepath.Join(dir, "samples.csv")); err != nil {
		return nil, fmt.Errorf("create samples.csv: %w", err)
	}
	if r.jsFile, err = os.Create(filepath.Join(dir, "samples.jsonl")); err != nil {
		r.csvFile.Close()
		return nil, fmt.Errorf("create samples.jsonl: %w", err)
	}
	r.csv, r.js = csv.NewWriter(r.csvFile), bufio.NewWriter(r.jsFile)
	var header []string
	for _, c := range sampleColumns() {
		header = append(header, c.name)
	}
	if err := r.csv.Write(header); err != nil {
		r.close()
		return nil, fmt.Errorf("write samples.csv: %w", err)
	}
	return r, nil
}

// add records one sample. Only the sampler goroutine, and after it ends
// the caller, add samples, so no lock.
func (r *sampleRecorder) add(s soakSample) error {
	r.samples = append(r.samples, s)
	row := make([]string, 0, 24)
	for _, c := range sampleColumns() {
		row = append(row, c.cell(&s))
	}
	if err := r.csv.Write(row); err != nil {
		return fmt.Errorf("write samples.csv: %w", err)
	}
	r.csv.Flush()
	b, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("encode sample: %w", err)
	}
	if _, err := r.js.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("write samples.jsonl: %w", err)
	}
	if err := errors.Join(r.csv.Error(), r.js.Flush()); err != nil {
		return fmt.Errorf("write samples: %w", err)
	}
	return nil
}

// close flushes and closes both files; a second call does nothing.
func (r *sampleRecorder) close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	r.csv.Flush()
	return errors.Join(r.csv.Error(), r.js.Flush(), r.csvFile.Close(), r.jsFile.Close())
}

// seriesMax is the largest value of a measure over samples, NaN if none.
func seriesMax(samples []soakSample, value func(*soakSample) (float64, bool)) float64 {
	m := math.NaN()
	for i := range samples {
		if v, ok := value(&samples[i]); ok && (math.IsNaN(m) || v > m) {
			m = v
		}
	}
	return m
}
