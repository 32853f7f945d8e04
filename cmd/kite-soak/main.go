// Command kite-soak is kite's endurance test: a day of Kubernetes churn
// compressed into --duration, against kite and the reference etcd side by
// side, each under its own identical load, measured over time; samples,
// charts and a pass/fail verdict on watch delivery, errors and growth.
//
//	kite-soak --kite-binary ./kite [--duration 60m] [--out DIR]
//	kite-soak --smoke --servers kite --kite-binary ./kite   (CI: 90 s)
//
// The reference etcd runs in its own process (the hidden etcd-server
// subcommand, testenv.RunEtcdServer), so its memory can be read from /proc and
// its CPU does not mix with the load generator's.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kite-db/kite/internal/testenv"
)

// soakConfig is everything the soak's flags decide. Rates are per second
// and per server: each server gets the same load from its own driver.
type soakConfig struct {
	// testenv.ToolFlags: --kite-binary, --work-dir, --startup-timeout,
	// --op-timeout and --log-level.
	testenv.ToolFlags
	servers []string // "etcd", "kite"
	out     string

	duration    time.Duration
	sampleEvery time.Duration

	objects    int     // live set of objects, spread over soakResources
	createRate float64 // objects created per second, and as many deleted
	updateRate float64

	eventRate float64
	eventTTL  time.Duration

	nodes          int
	nodeLeaseEvery time.Duration
	keepalives     int
	keepaliveTTL   time.Duration

	compactEvery  time.Duration
	compactWindow time.Duration
	listEvery     time.Duration

	growthFactor float64
	growthSlack  int64 // bytes

}

// Names of --servers.
const (
	soakEtcd = "etcd"
	soakKite = "kite"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == testenv.EtcdServerCommand {
		os.Exit(testenv.RunEtcdServer("kite-soak", os.Args[2:]))
	}
	os.Exit(runSoakMain(os.Args[1:], os.Stdout, os.Stderr))
}

func runSoakMain(args []string, stdout, stderr io.Writer) int {
	cfg, level, err := parseSoakFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "kite-soak: %v\n", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	pass, err := runSoak(ctx, cfg, log, stdout)
	if err != nil {
		log.Error("soak failed", "error", err)
		return 1
	}
	if !pass {
		return 1
	}
	return 0
}

func parseSoakFlags(args []string, stderr io.Writer) (*soakConfig, slog.Level, error) {
	cfg := &soakConfig{}
	fs := flag.NewFlagSet("kite-soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var servers string
	var smoke bool
	var slackMiB float64
	fs.StringVar(&servers, "servers", "etcd,kite", "servers to soak side by side, each under its own identical load: etcd, kite or both")
	cfg.ToolFlags.Register(fs, "kite binary (default: kite next to kite-soak, then $PATH); \"etcd\" soaks a second reference etcd in its place",
		"parent of the servers' temporary data directories (default: $TMPDIR)")
	fs.StringVar(&cfg.out, "out", "soak-out", "directory for samples.csv, samples.jsonl, summary.json and one PNG chart per measure")
	fs.DurationVar(&cfg.duration, "duration", 60*time.Minute, "length of the load (the default rates make an hour of it about a day of a 50-node cluster's churn)")
	fs.DurationVar(&cfg.sampleEvery, "sample-interval", 30*time.Second, "how often each measure is recorded (not given: --duration/120, at least 5s)")
	fs.IntVar(&cfg.objects, "objects", 5000, "live objects (1-2 KiB) under /registry/<resource>/<ns>/<name>, kept about constant")
	fs.Float64Var(&cfg.createRate, "create-rate", 4, "objects created per second, and as many deleted")
	fs.Float64Var(&cfg.updateRate, "update-rate", 40, "object updates per second (kube-apiserver's compare-mod-revision txn)")
	fs.Float64Var(&cfg.eventRate, "event-rate", 20, "events created per second, each on a short-TTL lease shared as kube-apiserver shares them")
	fs.DurationVar(&cfg.eventTTL, "event-ttl", 60*time.Second, "events' TTL, kube-apiserver's --event-ttl compressed (not given: --duration/60, at least 20s)")
	fs.IntVar(&cfg.nodes, "nodes", 50, "nodes whose Lease object is renewed (a put each --node-lease-interval)")
	fs.DurationVar(&cfg.nodeLeaseEvery, "node-lease-interval", 2*time.Second, "renewal period of each node's Lease (kubelet's 10 s, compressed)")
	fs.IntVar(&cfg.keepalives, "keepalive-leases", 3, "etcd leases kept alive with KeepAlive, each holding a key")
	fs.DurationVar(&cfg.keepaliveTTL, "keepalive-ttl", 10*time.Second, "TTL of the kept-alive leases")
	fs.DurationVar(&cfg.compactEvery, "compact-interval", 5*time.Minute, "kube-apiserver's compaction interval, --etcd-compaction-interval (not given: --duration/12, at least 5s)")
	fs.DurationVar(&cfg.compactWindow, "compact-window", 10*time.Second, "how long after a Compact call returns writes still count toward its pause, as the servers delete history in the background (physical=false); not given: --duration/360, at least 2s")
	fs.DurationVar(&cfg.listEvery, "list-interval", 10*time.Second, "how often one resource prefix is listed in pages of 500")
	fs.Float64Var(&cfg.growthFactor, "growth-factor", 1.5, "fail if the db (or WAL) size in the last third of the run exceeds this factor times its size at the end of the first third, plus --growth-slack")
	fs.Float64Var(&slackMiB, "growth-slack", 16, "MiB of db growth allowed beyond --growth-factor (the WAL gets 64 MiB more: one etcd WAL segment)")
	fs.BoolVar(&smoke, "smoke", false, "compressed timings for CI: 90 s, a small live set, compaction every 10 s (flags given explicitly still win)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `kite-soak: an endurance test. Objects created, updated and deleted,
events on expiring leases, node leases, kept-alive leases, watchers on every
prefix, kube-apiserver's compaction and paginated lists, against each server
at once; measures sampled over time, charts drawn, pass/fail decided.

  kite-soak --kite-binary ./kite [--duration 60m] [--out DIR]

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, 0, err
	}
	if fs.NArg() > 0 {
		return nil, 0, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	level, err := cfg.LogLevel()
	if err != nil {
		return nil, 0, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if smoke {
		applySoakSmoke(cfg, &slackMiB, set)
	}
	scaleSoakTimings(cfg, set)
	cfg.growthSlack = int64(slackMiB * (1 << 20))
	for s := range strings.SplitSeq(servers, ",") {
		if s = strings.TrimSpace(s); s != "" {
			cfg.servers = append(cfg.servers, s)
		}
	}
	return cfg, level, validateSoak(cfg)
}

// applySoakSmoke scales the run down to CI size, leaving alone every flag
// given on the command line. The event TTL stays at 20 s: below that
// kube-apiserver's lease reuse window (5% of the TTL) rounds to no reuse.
// Compaction runs every 10 s so that the first third of the run (30 s)
// already holds two cycles: the history kept, and with it the database,
// has reached the size the growth check compares the last third with.
func applySoakSmoke(cfg *soakConfig, slackMiB *float64, set map[string]bool) {
	preset := func(name string, apply func()) {
		if !set[name] {
			apply()
			set[name] = true // not scaled to --duration afterwards
		}
	}
	preset("duration", func() { cfg.duration = 90 * time.Second })
	preset("sample-interval", func() { cfg.sampleEvery = 5 * time.Second })
	preset("objects", func() { cfg.objects = 400 })
	preset("create-rate", func() { cfg.createRate = 4 })
	preset("update-rate", func() { cfg.updateRate = 20 })
	preset("event-rate", func() { cfg.eventRate = 8 })
	preset("event-ttl", func() { cfg.eventTTL = 20 * time.Second })
	preset("nodes", func() { cfg.nodes = 20 })
	preset("node-lease-interval", func() { cfg.nodeLeaseEvery = time.Second })
	preset("keepalive-ttl", func() { cfg.keepaliveTTL = 5 * time.Second })
	preset("compact-interval", func() { cfg.compactEvery = 10 * time.Second })
	preset("compact-window", func() { cfg.compactWindow = 2 * time.Second })
	preset("list-interval", func() { cfg.listEvery = 3 * time.Second })
	preset("growth-slack", func() { *slackMiB = 4 })
}

// scaleSoakTimings fits the timings not given on the command line to
// --duration: their defaults are for the default hour, and a shorter run
// must still see several compactions and samples. Rates are not scaled:
// they are the load's intensity, whatever its length. The floors keep
// kube-apiserver's event lease reuse (the TTL's 5% must round to at least
// a second), a compaction window longer than a background compaction of
// a short interval's history, and a sample interval that keeps the
// output readable.
func scaleSoakTimings(cfg *soakConfig, set map[string]bool) {
	k := cfg.duration.Seconds() / time.Hour.Seconds()
	scale := func(name string, v *time.Duration, hour, floor time.Duration) {
		if !set[name] {
			*v = max(floor, time.Duration(float64(hour)*k).Round(time.Second))
		}
	}
	scale("sample-interval", &cfg.sampleEvery, 30*time.Second, 5*time.Second)
	scale("compact-interval", &cfg.compactEvery, 5*time.Minute, 5*time.Second)
	scale("compact-window", &cfg.compactWindow, 10*time.Second, 2*time.Second)
	scale("event-ttl", &cfg.eventTTL, 60*time.Second, 20*time.Second)
	if !set["list-interval"] {
		cfg.listEvery = min(cfg.listEvery, max(time.Second, cfg.duration/12))
	}
}

func validateSoak(cfg *soakConfig) error {
	switch {
	case len(cfg.servers) == 0:
		return errors.New("--servers names no server")
	case cfg.duration <= 0 || cfg.sampleEvery <= 0 || cfg.OpTimeout <= 0:
		return errors.New("--duration, --sample-interval and --op-timeout must be positive")
	case cfg.sampleEvery > cfg.duration/3:
		return errors.New("--sample-interval must be at most a third of --duration (the growth check compares thirds)")
	case cfg.objects < len(soakResources()):
		return fmt.Errorf("--objects must be at least %d (one per resource)", len(soakResources()))
	case cfg.createRate < 0 || cfg.updateRate < 0 || cfg.eventRate < 0:
		return errors.New("rates cannot be negative")
	case cfg.eventTTL < 2*time.Second || cfg.keepaliveTTL < 2*time.Second:
		return errors.New("--event-ttl and --keepalive-ttl must be at least 2s (the servers' minimum lease TTL)")
	case cfg.nodes < 0 || cfg.keepalives < 0:
		return errors.New("--nodes and --keepalive-leases cannot be negative")
	case cfg.nodes > 0 && cfg.nodeLeaseEvery <= 0:
		return errors.New("--node-lease-interval must be positive")
	case cfg.compactEvery <= 0 || cfg.listEvery <= 0 || cfg.compactWindow < 0:
		return errors.New("--compact-interval and --list-interval must be positive, --compact-window not negative")
	case cfg.growthFactor < 1 || cfg.growthSlack < 0:
		return errors.New("--growth-factor must be at least 1, --growth-slack not negative")
	}
	for i, s := range cfg.servers {
		if s != soakEtcd && s != soakKite {
			return fmt.Errorf("--servers: unknown server %q (want %s or %s)", s, soakEtcd, soakKite)
		}
		if slices.Contains(cfg.servers[:i], s) {
			return fmt.Errorf("--servers: %s given twice", s)
		}
	}
	return nil
}

// soakServer is one server under the soak, its connections, and
// everything measured on it.
type soakServer struct {
	name  string
	proc  *testenv.ToolServer
	t     *target
	stats *soakStats
	watch *soakWatch
	load  *soakLoad
}

// runSoak starts the servers, drives them all at once for --duration,
// samples them every --sample-interval, and writes the samples, charts
// and summary. It reports whether every server passed.
func runSoak(ctx context.Context, cfg *soakConfig, log *slog.Logger, stdout io.Writer) (bool, error) {
	if err := os.MkdirAll(cfg.out, 0o755); err != nil {
		return false, fmt.Errorf("create --out: %w", err)
	}
	var servers []*soakServer
	defer func() {
		for _, s := range servers {
			s.t.close()
			s.proc.Stop()
		}
	}()
	for _, name := range cfg.servers {
		argv, err := soakArgv(name, cfg)
		if err != nil {
			return false, err
		}
		p, err := startSoakProc(ctx, cfg, log, name, argv)
		if err != nil {
			return false, err
		}
		t, err := connect(name, p.Endpoint, soakConns)
		if err != nil {
			p.Stop()
			return false, err
		}
		stats := newSoakStats(name, log)
		watch := newSoakWatch(stats, soakPrefixes())
		servers = append(servers, &soakServer{
			name:  name,
			proc:  p,
			t:     t,
			stats: stats,
			watch: watch,
			load:  newSoakLoad(cfg, t, stats, watch, log),
		})
	}

	// Watchers first, from the revision before the first write, so that
	// they must see the preload's creates too.
	err := eachServer(servers, func(s *soakServer) error {
		if err := s.watch.start(ctx, s.t.conns[0]); err != nil {
			return fmt.Errorf("%s: start watchers: %w", s.name, err)
		}
		log.Info("preloading", "server", s.name, "objects", cfg.objects, "nodes", cfg.nodes, "keepalive_leases", cfg.keepalives)
		if err := s.load.preload(ctx); err != nil {
			return fmt.Errorf("%s: preload: %w", s.name, err)
		}
		return nil
	})
	defer func() {
		for _, s := range servers {
			s.load.stopKeepalives()
			s.watch.stop()
		}
	}()
	if err != nil {
		return false, err
	}

	rec, err := newSampleRecorder(cfg.out)
	if err != nil {
		return false, err
	}
	defer rec.close()
	if 2*cfg.compactEvery > cfg.duration/3 {
		log.Warn("fewer than two compaction cycles in the first third of the run: the growth check compares the last third with a store that has not reached its steady size",
			"compact_interval", cfg.compactEvery, "duration", cfg.duration)
	}
	start := time.Now()
	log.Info("soak load started", "servers", strings.Join(cfg.servers, ","), "duration", cfg.duration, "out", cfg.out)
	loadCtx, stopLoad := context.WithDeadline(ctx, start.Add(cfg.duration))
	defer stopLoad()
	var drivers sync.WaitGroup
	for _, s := range servers {
		drivers.Go(func() { s.load.drive(loadCtx) })
	}
	samplerCtx, stopSampler := context.WithCancel(ctx)
	var sampler sync.WaitGroup
	sampler.Go(func() { sampleEvery(samplerCtx, cfg, log, servers, start, rec) })
	drivers.Wait()
	stopSampler()
	sampler.Wait()

	// Drivers stopped: let the watchers catch up with the last writes, then
	// take the last sample and settle the books. An interrupted run gets
	// its charts and summary too (over the time it ran): an hour's run
	// stopped at minute 40 still says something.
	drainCtx := context.WithoutCancel(ctx)
	_ = eachServer(servers, func(s *soakServer) error { s.watch.drain(drainCtx, deliveryTimeout); return nil })
	end := time.Now()
	for _, s := range servers {
		if err := rec.add(takeSample(s, start, end, true, log)); err != nil {
			return false, err
		}
	}
	summaries := make([]soakSummary, len(servers))
	for i, s := range servers {
		summaries[i] = summarize(cfg, s, rec.samples, end)
	}
	if err := rec.close(); err != nil {
		return false, err
	}
	if err := drawSoakCharts(cfg.out, rec.samples, cfg.servers); err != nil {
		return false, err
	}
	if err := writeSummaryJSON(cfg.out, summaries); err != nil {
		return false, err
	}
	if err := writeSoakTable(stdout, cfg, summaries); err != nil {
		return false, err
	}
	if ctx.Err() != nil {
		return false, fmt.Errorf("interrupted after %s: %w", end.Sub(start).Round(time.Second), ctx.Err())
	}
	pass := true
	for _, s := range summaries {
		pass = pass && s.Pass
	}
	return pass, nil
}

// eachServer runs f on every server at once (both are set up in the same
// wall-clock time, so neither starts its load on a quieter machine) and
// returns every error.
func eachServer(servers []*soakServer, f func(*soakServer) error) error {
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		wg.Go(func() { errs[i] = f(s) })
	}
	wg.Wait()
	return errors.Join(errs...)
}
