// Command kite-bench is a load generator for etcd v3 endpoints with
// Kubernetes-shaped workloads. It measures one endpoint, or with --compare
// starts a reference etcd and a kite server side by side and prints
// kite/etcd ratios.
//
//	kite-bench --endpoints http://127.0.0.1:2379 [--workloads put@64,get,...]
//	kite-bench --compare --kite-binary ./kite [--memory-keys 100000]
//	kite-bench --smoke --endpoints ...      every workload, tiny (CI)
//
// `kite-bench etcd-server --data-dir D --listen URL` is the hidden reference
// server that --compare starts as its own process.
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
	"strings"
	"syscall"
	"time"
)

// defaultWorkloads is what a run measures when --workloads is not given:
// every shape issue 4 names, with the two put shapes its targets use.
const defaultWorkloads = "put@64,put@1,txn-update,get,get-serializable,list,list-stream,count,watch,mixed"

// config is everything the flags decide. It is built once and only read.
type config struct {
	endpoints   []string
	compare     bool
	kiteBinary  string
	workloads   []spec
	clients     int
	conns       int
	valSize     int
	keys        int
	total       int64
	duration    time.Duration
	opTimeout   time.Duration
	watchers    int
	events      int
	watchRate   float64
	memoryKeys  int
	smoke       bool
	jsonPath    string
	workDir     string
	startupWait time.Duration
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == etcdServerCommand {
		os.Exit(runEtcdServer(os.Args[2:]))
	}
	os.Exit(runMain(os.Args[1:], os.Stdout, os.Stderr))
}

// runMain parses the flags, runs the benchmark until done or interrupted,
// and returns the exit code.
func runMain(args []string, stdout, stderr io.Writer) int {
	cfg, logLevel, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "kite-bench: %v\n", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: logLevel}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, log, stdout); err != nil {
		log.Error("benchmark failed", "error", err)
		return 1
	}
	return 0
}

func parseFlags(args []string, stderr io.Writer) (*config, slog.Level, error) {
	cfg := &config{}
	fs := flag.NewFlagSet("kite-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var endpoints, workloads, logLevel string
	fs.StringVar(&endpoints, "endpoints", "", "comma-separated loopback client URLs to benchmark (not with --compare)")
	fs.BoolVar(&cfg.compare, "compare", false, "start a reference etcd and kite, run every workload on both, print kite/etcd ratios")
	fs.StringVar(&cfg.kiteBinary, "kite-binary", "", "kite binary for --compare (default: kite next to kite-bench, then $PATH); \"etcd\" runs a second reference etcd instead")
	fs.StringVar(&workloads, "workloads", defaultWorkloads, "comma-separated workloads, NAME or NAME@CLIENTS; names: "+strings.Join(workloadNames(), ", "))
	fs.IntVar(&cfg.clients, "clients", 16, "concurrent clients per workload (list and list-stream default to 1: their latency is the time of one full list)")
	fs.IntVar(&cfg.conns, "conns", 8, "gRPC connections the clients share")
	fs.IntVar(&cfg.valSize, "val-size", 1024, "value size in bytes")
	fs.IntVar(&cfg.keys, "keys", 10000, "key space of put, txn-update and the preloaded keys read by get, list, count and mixed")
	fs.Int64Var(&cfg.total, "total", 0, "operations per workload (0: bounded by --duration only)")
	fs.DurationVar(&cfg.duration, "duration", 10*time.Second, "time per workload (0: bounded by --total only)")
	fs.DurationVar(&cfg.opTimeout, "op-timeout", 30*time.Second, "deadline of a single request")
	fs.IntVar(&cfg.watchers, "watchers", 1000, "watch: watchers on the prefix")
	fs.IntVar(&cfg.events, "events", 1000, "watch: events written (each must reach every watcher exactly once)")
	fs.Float64Var(&cfg.watchRate, "watch-rate", 0, "watch: events written per second (0: as fast as one writer can)")
	fs.IntVar(&cfg.memoryKeys, "memory-keys", 0, "with --compare: preload this many keys into a fresh server of each kind and report its resident memory")
	fs.BoolVar(&cfg.smoke, "smoke", false, "run every workload tiny (a few seconds in all) to prove the tool works")
	fs.StringVar(&cfg.jsonPath, "json", "", "also write the JSON lines to this file")
	fs.StringVar(&cfg.workDir, "work-dir", "", "parent of the temporary data directories of --compare (default: $TMPDIR)")
	fs.DurationVar(&cfg.startupWait, "startup-timeout", 60*time.Second, "how long a started server may take to answer")
	fs.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return nil, 0, err
	}
	if fs.NArg() > 0 {
		return nil, 0, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(logLevel)); err != nil {
		return nil, 0, fmt.Errorf("--log-level: %w", err)
	}
	if endpoints != "" {
		cfg.endpoints = strings.Split(endpoints, ",")
	}
	if cfg.smoke {
		applySmoke(cfg)
	}
	specs, err := parseSpecs(workloads, cfg)
	if err != nil {
		return nil, 0, err
	}
	cfg.workloads = specs
	return cfg, level, validate(cfg)
}

// applySmoke shrinks every size so that all workloads together finish in
// seconds: the point is proving each code path, not measuring it.
func applySmoke(cfg *config) {
	cfg.keys = 200
	cfg.valSize = 128
	cfg.total = 100
	cfg.duration = 2 * time.Second
	cfg.clients = min(cfg.clients, 4)
	cfg.conns = min(cfg.conns, 2)
	cfg.watchers = 4
	cfg.events = 25
	cfg.memoryKeys = min(cfg.memoryKeys, 1000)
}

func validate(cfg *config) error {
	switch {
	case cfg.compare && len(cfg.endpoints) > 0:
		return errors.New("--compare starts its own servers; do not pass --endpoints")
	case !cfg.compare && len(cfg.endpoints) == 0:
		return errors.New("give --endpoints, or --compare")
	case !cfg.compare && cfg.memoryKeys > 0:
		return errors.New("--memory-keys needs --compare (only a server started here has a known process)")
	case cfg.total <= 0 && cfg.duration <= 0:
		return errors.New("give --total or --duration (or both)")
	case cfg.clients < 1 || cfg.conns < 1 || cfg.keys < 1 || cfg.valSize < 0:
		return errors.New("--clients, --conns and --keys must be at least 1, --val-size at least 0")
	case cfg.watchers < 1 || cfg.events < 1:
		return errors.New("--watchers and --events must be at least 1")
	}
	for _, ep := range cfg.endpoints {
		if err := checkLoopback(ep); err != nil {
			return err
		}
	}
	return nil
}
