package main

import (
	"bytes"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kite-db/kite/internal/testenv"
)

// TestSoakSmoke runs the soak with CI timings (90 s) against a kite built
// from this module (or $KITE_BENCH_KITE_BINARY) and fails on a missed,
// duplicated or disordered watch event, an error, or unbounded growth:
// runSoak's own verdict, plus checks that it measured what it says.
func TestSoakSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("a 90 s soak of a kite server")
	}
	kite := buildKite(t)
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	code := runSoakMain([]string{"--smoke", "--servers", "kite", "--kite-binary", kite,
		"--out", out, "--work-dir", t.TempDir(), "--log-level", "warn"}, &stdout, &stderr)
	t.Logf("summary:\n%s", &stdout)
	if code != 0 {
		t.Fatalf("soak: exit code %d\nstderr:\n%s", code, &stderr)
	}

	b, err := os.ReadFile(filepath.Join(out, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	var sums []soakSummary
	if err := json.Unmarshal(b, &sums); err != nil {
		t.Fatalf("summary.json: %v", err)
	}
	if len(sums) != 1 || sums[0].Server != "kite" {
		t.Fatalf("summary.json = %s, want one summary, of kite", b)
	}
	s := sums[0]
	switch {
	case !s.Pass:
		t.Errorf("kite failed the soak: %v", s.Failures)
	case s.Watch.Received < 3000 || s.Watch.Expired == 0:
		t.Errorf("watch tally %+v: want thousands of events received and some expired by their lease", s.Watch)
	case s.Compactions < 2 || s.DBMaxBytes == 0 || s.RSSPeakBytes == 0 || s.WriteP99MaxMs == 0 || s.ListP99MaxMs == 0:
		t.Errorf("summary %+v: want compactions, sizes, memory and latencies measured", s)
	}

	samples := 0
	jl, err := os.ReadFile(filepath.Join(out, "samples.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range bytes.Lines(jl) {
		var sm soakSample
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&sm); err != nil {
			t.Fatalf("samples.jsonl line %q: %v", line, err)
		}
		samples++
	}
	csvRows, err := os.ReadFile(filepath.Join(out, "samples.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if samples < 15 || bytes.Count(csvRows, []byte("\n")) != samples+1 {
		t.Errorf("%d JSON samples and %d CSV lines, want at least 15 (one per 5 s) and a CSV header", samples, bytes.Count(csvRows, []byte("\n")))
	}
	for _, m := range soakMeasures() {
		f, err := os.Open(filepath.Join(out, m.file))
		if err != nil {
			t.Error(err)
			continue
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil || img.Bounds().Dx() != chartW || img.Bounds().Dy() != chartH {
			t.Errorf("%s: %v, bounds %v", m.file, err, img.Bounds())
		}
	}
}

// TestSoakLedger checks the watch bookkeeping against each anomaly it
// must catch.
func TestSoakLedger(t *testing.T) {
	stats := newSoakStats("test", slog.New(slog.DiscardHandler))
	w := newSoakWatch(stats, []string{"/registry/pods/", soakEventsPrefix})
	pods, events := w.ledgers[0], w.ledgers[1]
	now := time.Now()
	put := func(l *watchLedger, key string, rev int64) {
		l.event(&clientv3.Event{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte(key), ModRevision: rev}}, now)
	}
	del := func(l *watchLedger, key string, rev int64) {
		l.event(&clientv3.Event{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: []byte(key), ModRevision: rev}}, now)
	}

	w.ack("/registry/pods/a", 10, false, now, time.Time{})
	put(pods, "/registry/pods/a", 10) // in order, after its ack
	put(pods, "/registry/pods/b", 12) // before its ack
	w.ack("/registry/pods/b", 12, false, now, time.Time{})
	put(pods, "/registry/pods/b", 12) // again
	w.ack("/registry/pods/c", 11, false, now, time.Time{})
	put(pods, "/registry/pods/c", 11)                                  // after revision 12
	w.ack("/registry/pods/d", 13, true, now, time.Time{})              // never received
	w.ack("/registry/pods/e", 14, true, now, time.Time{})              // received as a put
	put(pods, "/registry/pods/e", 14)                                  //
	put(pods, "/registry/pods/f", 15)                                  // nobody wrote it
	w.ack("/registry/pods/g", 16, false, now.Add(-time.Minute), now)   // missed, and overdue
	w.ack(soakEventsPrefix+"x", 20, false, now, now.Add(-time.Second)) // expired in time
	w.ack(soakEventsPrefix+"y", 21, false, now, now.Add(-time.Second)) // never expires
	w.ack(soakEventsPrefix+"z", 22, false, now, now.Add(time.Hour))    // not due yet
	put(events, soakEventsPrefix+"x", 20)
	put(events, soakEventsPrefix+"y", 21)
	put(events, soakEventsPrefix+"z", 22)
	del(events, soakEventsPrefix+"x", 30)
	del(events, soakEventsPrefix+"x", 30) // a repeat of the expiry
	del(events, soakEventsPrefix+"q", 30) // an event nobody created

	if got := w.counts(now, false); got.Missed != 1 {
		t.Errorf("while running: %+v, want only the overdue write missed", got)
	}
	got := w.counts(now, true)
	want := watchCounts{Received: 7, Missed: 2, Duplicates: 2, OutOfOrder: 1, Mismatched: 1, Unexpected: 2, Expired: 1, Unexpired: 1}
	if got != want {
		t.Errorf("final tally\n got %+v\nwant %+v", got, want)
	}
}

// TestSoakGrowth: a size that levels off passes, one that keeps climbing
// does not, and the slack absorbs small stores' noise.
func TestSoakGrowth(t *testing.T) {
	const mb = 1 << 20
	series := func(sizes ...int64) []soakSample {
		var s []soakSample
		for i, b := range sizes {
			s = append(s, soakSample{Minutes: float64(i), DBBytes: b})
		}
		return s
	}
	size := func(s *soakSample) int64 { return s.DBBytes }
	for _, tc := range []struct {
		name      string
		samples   []soakSample
		unbounded bool
	}{
		{"levels off", series(10*mb, 40*mb, 60*mb, 62*mb, 65*mb, 64*mb, 66*mb, 65*mb, 66*mb), false},
		{"keeps growing", series(10*mb, 40*mb, 60*mb, 80*mb, 100*mb, 120*mb, 140*mb, 160*mb, 180*mb), true},
		{"small and noisy", series(1*mb, 1*mb, 2*mb, 2*mb, 3*mb, 4*mb, 5*mb, 4*mb, 5*mb), false},
	} {
		g := checkGrowth(tc.samples, size, 8, 1.5, 16*mb)
		if g.Unbounded != tc.unbounded {
			t.Errorf("%s: %s: unbounded = %v, want %v", tc.name, g, g.Unbounded, tc.unbounded)
		}
	}
}

// TestSoakChart draws two series and checks the PNG holds both colours.
func TestSoakChart(t *testing.T) {
	series := []chartSeries{
		{name: "etcd", color: serverColor("etcd"), points: []chartPoint{{0, 1}, {1, 3}, {2, 2}}},
		{name: "kite", color: serverColor("kite"), points: []chartPoint{{0, 2}, {1, 2.5}, {2, 0.5}}},
	}
	path := filepath.Join(t.TempDir(), "c.png")
	if err := writePNG(path, drawChart("A title", "minutes", "MiB", false, series)); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[color.RGBA]int{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			seen[color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)]++
		}
	}
	for _, s := range series {
		if seen[s.color] < 100 {
			t.Errorf("%s's colour on %d pixels, want its line", s.name, seen[s.color])
		}
	}
	if b != image.Rect(0, 0, chartW, chartH) {
		t.Errorf("bounds %v", b)
	}
}

// TestSoakFlags: --smoke's timings, the scaling of the timings not given
// to --duration, and explicit flags winning over both.
func TestSoakFlags(t *testing.T) {
	cfg, _, err := parseSoakFlags([]string{"--smoke", "--compact-interval", "15s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.duration != 90*time.Second || cfg.compactEvery != 15*time.Second || cfg.eventTTL != 20*time.Second {
		t.Errorf("--smoke --compact-interval 15s: duration %v, compaction %v, event TTL %v", cfg.duration, cfg.compactEvery, cfg.eventTTL)
	}
	cfg, _, err = parseSoakFlags([]string{"--duration", "2m"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.compactEvery != 10*time.Second || cfg.sampleEvery != 5*time.Second || cfg.eventTTL != 20*time.Second || cfg.objects != 5000 {
		t.Errorf("--duration 2m: compaction %v, samples %v, event TTL %v, objects %d", cfg.compactEvery, cfg.sampleEvery, cfg.eventTTL, cfg.objects)
	}
	cfg, _, err = parseSoakFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.compactEvery != 5*time.Minute || cfg.sampleEvery != 30*time.Second || cfg.eventTTL != time.Minute {
		t.Errorf("defaults: compaction %v, samples %v, event TTL %v", cfg.compactEvery, cfg.sampleEvery, cfg.eventTTL)
	}
	for _, args := range [][]string{{"--servers", "kite,kine"}, {"--servers", "kite,kite"}, {"--duration", "10s", "--sample-interval", "5s"}} {
		if _, _, err := parseSoakFlags(args, io.Discard); err == nil || !strings.Contains(err.Error(), "--") {
			t.Errorf("%v: error %v, want one naming the flag", args, err)
		}
	}
}

// TestSoakPauseWindows: a write that overlaps a compaction window counts as
// that compaction's pause, one before or after it as the baseline outside
// every window, and the two never mix.
func TestSoakPauseWindows(t *testing.T) {
	s := newSoakStats("kite", slog.New(slog.DiscardHandler))
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	s.write(at(0), at(30), 1) // before any window
	s.openWindow(at(100))
	s.write(at(90), at(170), 2) // began before the window, ended in it
	s.closeWindow(at(500), 50*time.Millisecond)
	s.write(at(490), at(510), 3) // ended after the window, began in it
	s.write(at(600), at(640), 4) // after the window
	compactions, pause, outside, _, _ := s.totals()
	if compactions != 1 || pause != 80*time.Millisecond || outside != 40*time.Millisecond {
		t.Errorf("compactions %d, pause %v, outside %v; want 1, 80ms, 40ms", compactions, pause, outside)
	}
}

// buildKite returns $KITE_BENCH_KITE_BINARY, or else a kite built from
// this module.
func buildKite(t *testing.T) string {
	t.Helper()
	if kite := os.Getenv("KITE_BENCH_KITE_BINARY"); kite != "" {
		return kite
	}
	root, err := testenv.ModuleRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	kite, err := testenv.BuildKite(root, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return kite
}
