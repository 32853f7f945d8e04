// Command bench measures what the users of kube-apiserver 1.37 feel of its
// storage: ConfigMap create, update and delete rates and latencies, watch
// delivery latency, the time kube-apiserver takes to be ready again over a
// full store, and the storage's CPU and memory, against etcd, kite in each
// mode and kine. Run it from test/kube: go run ./bench --help.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/kite-db/kite/internal/testenv"
)

type config struct {
	storages       []string
	objects        int
	workers        int
	valueSize      int
	watchObjects   int
	watchRate      float64
	watchDuration  time.Duration
	watchGrace     time.Duration
	restartObjects int
	kiteBinary     string
	kiteFlags      []string
	kineBinary     string
	apiserverBin   string
	workDir        string
	keep           bool
	jsonOut        string
	postgresAdmin  string
	mysqlAdmin     string
	startupWait    time.Duration
	readyWait      time.Duration
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == testenv.EtcdServerCommand {
		os.Exit(testenv.RunEtcdServer("kube-bench", os.Args[2:]))
	}
	os.Exit(runMain(os.Args[1:]))
}

func runMain(args []string) int {
	cfg, err := parseFlags(args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kube-bench:", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	results, err := run(ctx, log, cfg)
	if len(results) > 0 {
		printTable(os.Stdout, cfg, results)
		if cfg.jsonOut != "" {
			if werr := writeJSON(cfg.jsonOut, cfg, results); werr != nil {
				log.Error("write json", "error", werr)
			}
		}
	}
	if err != nil {
		log.Error("benchmark failed", "error", err)
		return 1
	}
	return 0
}

func parseFlags(args []string) (*config, error) {
	cfg := &config{}
	fs := flag.NewFlagSet("kube-bench", flag.ContinueOnError)
	storages := fs.String("storage", "etcd,sqlite", "comma-separated storages: "+strings.Join(storageNames, ", "))
	fs.IntVar(&cfg.objects, "objects", 20000, "ConfigMaps created, updated and deleted")
	fs.IntVar(&cfg.workers, "workers", 32, "concurrent client requests")
	fs.IntVar(&cfg.valueSize, "value-size", 256, "bytes of padding in each ConfigMap's data")
	fs.IntVar(&cfg.watchObjects, "watch-objects", 200, "ConfigMaps the watched updates are spread over")
	fs.Float64Var(&cfg.watchRate, "watch-rate", 200, "watched updates per second")
	fs.DurationVar(&cfg.watchDuration, "watch-duration", 10*time.Second, "how long the watched updates go on")
	fs.DurationVar(&cfg.watchGrace, "watch-grace", 10*time.Second, "how long to wait for outstanding events after the last update before counting them missed")
	fs.IntVar(&cfg.restartObjects, "restart-objects", 50000, "ConfigMaps stored when kube-apiserver is restarted")
	fs.StringVar(&cfg.kiteBinary, "kite-binary", "", "kite binary (default: build ./cmd/kite of the repository)")
	kiteFlags := fs.String("kite-flags", "", "extra flags for every kite, space-separated (e.g. --experimental-sqlite-log-commit)")
	fs.StringVar(&cfg.kineBinary, "kine-binary", "", "kine binary for the kine-* storages (default: build kine "+testenv.KineVersion+", cached)")
	fs.StringVar(&cfg.apiserverBin, "kube-apiserver", "", "kube-apiserver binary (default: go build it from the test/kube module)")
	fs.StringVar(&cfg.workDir, "work-dir", "", "directory for binaries, data and logs (default: a fresh temporary one, removed at the end)")
	fs.BoolVar(&cfg.keep, "keep", false, "keep the work directory (data and logs)")
	fs.StringVar(&cfg.jsonOut, "json", "", "also write the results as JSON to this file (- for stdout)")
	fs.StringVar(&cfg.postgresAdmin, "postgres-admin", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "Postgres admin URL that creates each run's database")
	fs.StringVar(&cfg.mysqlAdmin, "mysql-admin", "mysql://root@tcp(127.0.0.1:3306)/", "MySQL/MariaDB admin DSN that creates each run's database")
	fs.DurationVar(&cfg.startupWait, "startup-timeout", 60*time.Second, "how long a storage server may take to answer")
	fs.DurationVar(&cfg.readyWait, "ready-timeout", 5*time.Minute, "how long kube-apiserver may take to be ready")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	seen := map[string]bool{}
	for _, s := range strings.Split(*storages, ",") {
		s = strings.TrimSpace(s)
		if s == "" || seen[s] {
			continue
		}
		known := false
		for _, n := range storageNames {
			known = known || n == s
		}
		if !known {
			return nil, fmt.Errorf("--storage %q: want %s", s, strings.Join(storageNames, ", "))
		}
		seen[s] = true
		cfg.storages = append(cfg.storages, s)
	}
	cfg.kiteFlags = strings.Fields(*kiteFlags)
	switch {
	case len(cfg.storages) == 0:
		return nil, errors.New("--storage names none")
	case cfg.objects < 1 || cfg.workers < 1 || cfg.restartObjects < 1 || cfg.watchObjects < 1:
		return nil, errors.New("--objects, --workers, --restart-objects and --watch-objects must be at least 1")
	case cfg.watchRate <= 0 || cfg.watchDuration <= 0:
		return nil, errors.New("--watch-rate and --watch-duration must be positive")
	}
	return cfg, nil
}

// result is one storage's row.
type result struct {
	Storage string        `json:"storage"`
	Create  phase         `json:"create"`
	Update  phase         `json:"update"`
	Delete  phase         `json:"delete"`
	Watch   watchResult   `json:"watch"`
	Restart restartResult `json:"restart"`
	// StorageCPU is the storage processes' user+system CPU over the whole
	// run of this storage; StoragePeakRSS their VmHWM, summed over members.
	StorageCPU     float64 `json:"storage_cpu_s"`
	StoragePeakRSS int64   `json:"storage_peak_rss_bytes"`
	// APIServerCPU is both kube-apiserver processes' CPU (before and after
	// the restart).
	APIServerCPU float64 `json:"apiserver_cpu_s"`
	// Requests counts kube-apiserver's requests to storage by operation
	// (both processes), over all resources and for ConfigMaps.
	Requests          map[string]float64 `json:"storage_requests"`
	ConfigMapRequests map[string]float64 `json:"configmap_storage_requests"`
	// PhaseRequests is ConfigMapRequests by phase ("restart": the second
	// kube-apiserver's, from its start).
	PhaseRequests map[string]map[string]float64 `json:"configmap_storage_requests_by_phase"`
	Error         string                        `json:"error,omitempty"`
	Seconds       float64                       `json:"seconds"`
}

func run(ctx context.Context, log *slog.Logger, cfg *config) ([]result, error) {
	if cfg.workDir == "" {
		d, err := os.MkdirTemp("", "kite-kube-bench-")
		if err != nil {
			return nil, fmt.Errorf("work dir: %w", err)
		}
		cfg.workDir = d
		if !cfg.keep {
			defer os.RemoveAll(d)
		}
	} else if err := os.MkdirAll(cfg.workDir, 0o755); err != nil {
		return nil, fmt.Errorf("work dir: %w", err)
	}
	bins, err := resolveBinaries(ctx, log, cfg)
	if err != nil {
		return nil, err
	}
	var results []result
	var errs []error
	for _, name := range cfg.storages {
		if ctx.Err() != nil {
			break
		}
		r, err := runStorage(ctx, log, cfg, bins, name)
		if err != nil {
			log.Error("storage run failed", "storage", name, "error", err)
			r.Error = err.Error()
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
		results = append(results, r)
	}
	return results, errors.Join(append(errs, ctx.Err())...)
}

// resolveBinaries finds or builds kite, kube-apiserver and (for a kine-*
// storage) kine. Builds go through the go command, whose cache makes a
// rebuild cheap.
func resolveBinaries(ctx context.Context, log *slog.Logger, cfg *config) (binaries, error) {
	var b binaries
	var err error
	if b.self, err = testenv.EtcdServerBinary(); err != nil {
		return b, err
	}
	wd, err := os.Getwd()
	if err != nil {
		return b, err
	}
	bin := filepath.Join(cfg.workDir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return b, err
	}
	needKite, needKine := false, false
	for _, s := range cfg.storages {
		needKite = needKite || (!strings.HasPrefix(s, "etcd") && !strings.HasPrefix(s, "kine-"))
		needKine = needKine || strings.HasPrefix(s, "kine-")
	}
	var root string
	if needKite && cfg.kiteBinary == "" || cfg.apiserverBin == "" {
		if root, err = testenv.ModuleRoot(wd); err != nil {
			return b, fmt.Errorf("find the repository (run from test/kube): %w", err)
		}
	}
	if needKite {
		if cfg.kiteBinary == "" {
			log.Info("building kite", "root", root)
			if b.kite, err = testenv.BuildKite(root, bin); err != nil {
				return b, err
			}
		} else if b.kite, err = testenv.FindKite(cfg.kiteBinary); err != nil {
			return b, err
		}
	}
	if needKine {
		if b.kine, err = testenv.FindKine(ctx, log, cfg.kineBinary, ""); err != nil {
			return b, err
		}
	}
	if cfg.apiserverBin == "" {
		out := filepath.Join(bin, "kube-apiserver")
		log.Info("building kube-apiserver (cold: about ten minutes)", "module", filepath.Join(root, "test", "kube"))
		cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "k8s.io/kubernetes/cmd/kube-apiserver")
		cmd.Dir = filepath.Join(root, "test", "kube")
		if o, err := cmd.CombinedOutput(); err != nil {
			return b, fmt.Errorf("go build kube-apiserver: %w\n%s", err, o)
		}
		cfg.apiserverBin = out
	} else if cfg.apiserverBin, err = exec.LookPath(cfg.apiserverBin); err != nil {
		return b, fmt.Errorf("--kube-apiserver: %w", err)
	}
	if cfg.apiserverBin, err = filepath.Abs(cfg.apiserverBin); err != nil {
		return b, err
	}
	return b, nil
}

// runStorage is every step on one storage, with its own kube-apiserver.
func runStorage(ctx context.Context, log *slog.Logger, cfg *config, bins binaries, name string) (result, error) {
	r := result{Storage: name}
	begin := time.Now()
	defer func() { r.Seconds = time.Since(begin).Seconds() }()
	log = log.With("storage", name)
	log.Info("starting storage")
	st, err := startStorage(ctx, cfg, log, bins, name)
	if err != nil {
		return r, err
	}
	defer st.stop(cfg.keep)
	cpu := func() float64 {
		c, err := st.cpuSeconds()
		if err != nil {
			log.Warn("storage cpu", "error", err)
		}
		return c
	}

	dir, err := os.MkdirTemp(cfg.workDir, "kube-apiserver-"+name+"-")
	if err != nil {
		return r, fmt.Errorf("kube-apiserver dir: %w", err)
	}
	api, err := newAPIServer(log, cfg.apiserverBin, dir, st.endpoints())
	if err != nil {
		return r, err
	}
	defer api.stop()
	if _, err := api.start(ctx, cfg.readyWait); err != nil {
		return r, err
	}
	cs, err := api.client()
	if err != nil {
		return r, err
	}
	// The numbers of a storage that died under the load are not its own.
	check := func(step string) error {
		if err := st.Exited(); err != nil {
			return fmt.Errorf("during %s: %w", step, err)
		}
		return nil
	}

	// The ConfigMap requests each phase sent to storage: the counters'
	// differences between the phase's ends.
	r.PhaseRequests = map[string]map[string]float64{}
	var prev map[string]float64
	mark := func(phase string) {
		_, cm, err := api.scrapeStorageRequests(ctx)
		if err != nil {
			log.Warn("storage requests", "phase", phase, "error", err)
			return
		}
		if phase != "" {
			d := map[string]float64{}
			for op, v := range cm {
				if v -= prev[op]; v != 0 {
					d[op] = v
				}
			}
			r.PhaseRequests[phase] = d
		}
		prev = cm
	}
	mark("")
	if r.Create, r.Update, r.Delete, err = crud(ctx, log, cfg, cs, cpu, mark); err != nil {
		return r, err
	}
	if err := check("create/update/delete"); err != nil {
		return r, err
	}
	if r.Watch, err = watchDelivery(ctx, log, cfg, cs); err != nil {
		return r, err
	}
	mark("watch")
	if err := check("watch delivery"); err != nil {
		return r, err
	}
	r.Restart.Objects = cfg.restartObjects
	if r.Restart.Load, err = fill(ctx, log, cfg, cs, cpu); err != nil {
		return r, err
	}
	mark("fill")

	// Counters and CPU of the first kube-apiserver end with it.
	all1, cm1, err := api.scrapeStorageRequests(ctx)
	if err != nil {
		return r, err
	}
	r.APIServerCPU = api.cpuSeconds()
	api.stop()
	log.Info("kube-apiserver stopped; starting it again", "objects", cfg.restartObjects)
	begin2 := time.Now()
	ready, err := api.start(ctx, cfg.readyWait)
	if err != nil {
		return r, fmt.Errorf("restart: %w", err)
	}
	r.Restart.ReadySeconds = ready.Seconds()
	if cs, err = api.client(); err != nil {
		return r, err
	}
	if err := listedAll(ctx, cs, cfg.restartObjects, cfg.readyWait); err != nil {
		return r, err
	}
	r.Restart.ListSeconds = time.Since(begin2).Seconds()
	log.Info("kube-apiserver ready again", "ready_s", r.Restart.ReadySeconds, "listed_all_s", r.Restart.ListSeconds)
	if err := check("restart"); err != nil {
		return r, err
	}

	all2, cm2, err := api.scrapeStorageRequests(ctx)
	if err != nil {
		return r, err
	}
	r.Requests, r.ConfigMapRequests = sumCounts(all1, all2), sumCounts(cm1, cm2)
	r.PhaseRequests["restart"] = cm2
	r.APIServerCPU += api.cpuSeconds()
	r.StorageCPU = cpu()
	if r.StoragePeakRSS, err = st.peakRSS(); err != nil {
		return r, err
	}
	log.Info("storage done", "cpu_s", r.StorageCPU, "peak_rss_mib", r.StoragePeakRSS>>20)
	return r, nil
}

func sumCounts(ms ...map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for _, m := range ms {
		for k, v := range m {
			out[k] += v
		}
	}
	return out
}

func writeJSON(path string, cfg *config, results []result) error {
	doc := map[string]any{
		"date": time.Now().UTC().Format(time.RFC3339), "objects": cfg.objects, "workers": cfg.workers,
		"value_size": cfg.valueSize, "watch_rate": cfg.watchRate, "watch_duration_s": cfg.watchDuration.Seconds(),
		"restart_objects": cfg.restartObjects, "kite_flags": cfg.kiteFlags, "results": results,
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	if path == "-" {
		_, err = os.Stdout.Write(append(b, '\n'))
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
