// Command kite-bench is a load generator for etcd v3 endpoints with
// Kubernetes-shaped workloads. It measures one endpoint, or with --compare
// starts a reference etcd and a kite server side by side and prints
// kite/etcd ratios.
//
//	kite-bench --endpoints http://127.0.0.1:2379 [--workloads put@64,get,...]
//	kite-bench --compare --kite-binary ./kite [--memory-keys 100000]
//	kite-bench --compare --datastore postgres [--kite-servers 2] [--kine-binary auto]
//	kite-bench --compare --datastore mysql [--kite-servers 2] [--kine-binary auto]
//	kite-bench --compare --datastore raftsql --members 3 [--workloads ...,failover]
//	kite-bench --smoke --endpoints ...      every workload, tiny (CI)
//	kite-bench build-kine [--dir D]          build the kine reference, print its path
//
// In postgres mode (--datastore postgres) kite runs on a fresh database
// that kite-bench creates on --postgres-admin and drops at the end, and
// --kine-binary adds kine (github.com/k3s-io/kine), the storage shim k3s
// uses, on a fresh database of its own as a second reference. kine is not
// a dependency of kite's module: internal/testenv builds it with the go
// command from its own module (see testenv.BuildKine). mysql mode
// (--datastore mysql) is the same on the MySQL or MariaDB server of
// --mysql-admin.
//
// In raftsql mode (--datastore raftsql) kite and the reference etcd are
// each a raft cluster of --members processes on loopback ports, started
// with etcd's clustering flags (testenv.KiteArgv and testenv.StartCluster,
// the leader polled in raftsql.go); the failover workload kills
// the leader of each and times the recovery (workload_failover.go).
//
// `kite-bench etcd-server --data-dir D --listen URL` is the hidden reference
// server that --compare starts as its own process; in raftsql mode, with
// --name, --listen-peer, --initial-cluster and --initial-cluster-token, one
// member of a reference etcd cluster.
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

	"github.com/kite-db/kite/internal/testenv"
)

// defaultWorkloads is what a run measures when --workloads is not given:
// every shape issue 4 names, with the two put shapes its targets use.
const defaultWorkloads = "put@64,put@1,txn-update,get,get-serializable,list,list-stream,count,watch,mixed"

// smokeWorkloads is what --smoke runs when --workloads is not given: the
// defaults and every other workload a single server can serve.
const smokeWorkloads = defaultWorkloads + ",delete,list-all,list-under-writes,put-paced"

// config is everything the flags decide. It is built once and only read.
type config struct {
	// testenv.ToolFlags: --kite-binary (for --compare), --work-dir,
	// --startup-timeout, --op-timeout and --log-level.
	testenv.ToolFlags
	endpoints  []string
	compare    bool
	workloads  []spec
	clients    int
	conns      int
	valSize    int
	keys       int
	total      int64
	duration   time.Duration
	watchers   int
	events     int
	watchRate  float64
	writeRate  float64 // list-under-writes: its writer's puts per second
	pacedRate  float64 // put-paced: puts offered per second
	deleteKeys int     // delete: keys to load (0: --total, else per --duration)
	loadTxnOps int     // puts per transaction of loadKeys
	memoryKeys int
	smoke      bool
	jsonPath   string

	// Database-server modes, postgres and mysql (--compare only).
	datastore     string // one of the datastore* constants
	postgresAdmin string
	mysqlAdmin    string
	kiteServers   int
	kineBinary    string // "": no kine; kineAuto: build it; else a path
	kineServers   int
	kineCacheDir  string

	// Raftsql mode (--compare only): members of kite's raft cluster and
	// of the reference etcd's, and how many leaders failover kills.
	members   int
	failovers int

	// quotaBackendBytes is the --quota-backend-bytes of the reference etcd
	// and of kite (0: each one's default, 2 GiB).
	quotaBackendBytes int64

	// CPU profiles of kite (started with --enable-pprof) during these
	// workloads, written to profileDir.
	profile    map[string]bool
	profileDir string
}

// Storage kinds of --datastore.
const (
	datastoreSQLite   = "sqlite"
	datastorePostgres = testenv.DatabasePostgres
	datastoreMySQL    = testenv.DatabaseMySQL
	datastoreRaftSQL  = "raftsql"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == testenv.EtcdServerCommand {
		os.Exit(testenv.RunEtcdServer("kite-bench", os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == buildKineCommand {
		os.Exit(runBuildKine(os.Args[2:], os.Stdout, os.Stderr))
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
	var endpoints, workloads, profile string
	fs.StringVar(&endpoints, "endpoints", "", "comma-separated loopback client URLs to benchmark (not with --compare)")
	fs.BoolVar(&cfg.compare, "compare", false, "start a reference etcd and kite, run every workload on both, print kite/etcd ratios")
	cfg.ToolFlags.Register(fs, "kite binary for --compare (default: kite next to kite-bench, then $PATH); \"etcd\" runs a second reference etcd instead",
		"parent of the temporary data directories of --compare (default: $TMPDIR)")
	fs.StringVar(&workloads, "workloads", defaultWorkloads, "comma-separated workloads, NAME or NAME@CLIENTS; names: "+strings.Join(workloadNames(), ", "))
	fs.IntVar(&cfg.clients, "clients", 16, "concurrent clients per workload (list, list-all, list-stream and list-under-writes default to 1: their latency is the time of one full list)")
	fs.IntVar(&cfg.conns, "conns", 8, "gRPC connections the clients share")
	fs.IntVar(&cfg.valSize, "val-size", 1024, "value size in bytes")
	fs.IntVar(&cfg.keys, "keys", 10000, "key space of put, txn-update and the preloaded keys read by get, list, count and mixed (loaded in transactions of --load-txn-ops puts, its rate reported as the \"load\" row; 1000000 of 1 KiB needs --etcd-quota-backend-bytes above 2 GiB)")
	fs.Int64Var(&cfg.total, "total", 0, "operations per workload (0: bounded by --duration only)")
	fs.DurationVar(&cfg.duration, "duration", 10*time.Second, "time per workload (0: bounded by --total only)")
	fs.IntVar(&cfg.watchers, "watchers", 1000, "watch: watchers on the prefix")
	fs.IntVar(&cfg.events, "events", 1000, "watch: events written (each must reach every watcher exactly once)")
	fs.Float64Var(&cfg.watchRate, "watch-rate", 0, "watch: events written per second (0: as fast as one writer can)")
	fs.Float64Var(&cfg.writeRate, "write-rate", 50, "list-under-writes: puts per second of its one writer while the lists run (0: as fast as one writer can)")
	fs.Float64Var(&cfg.pacedRate, "paced-rate", 200, "put-paced: puts offered per second in an open loop, each timed from when it was due (200/s is test/kube/bench's paced phase)")
	fs.IntVar(&cfg.deleteKeys, "delete-keys", 0, fmt.Sprintf("delete: keys loaded before the clock starts, each deleted once; the workload ends early when they are used up (0: --total if given, else enough for %d deletes/s per client, at least %d/s and at most %d/s, over --duration)", deleteRatePerClient, deleteRateMin, deleteRateMax))
	fs.IntVar(&cfg.loadTxnOps, "load-txn-ops", loadTxnOps, "puts per transaction when loading the --keys shared keys and delete's keys (fewer when that many values of --val-size would exceed 1 MiB). 128, etcd's and kite's default --max-txn-ops, loads fastest, but etcd keeps its last 5,000 raft entries in memory (for slow followers), so its resident memory then holds up to 5,000 transactions of 128 values (about 640 MiB with --keys 1000000 of 1 KiB); give 1 to load one Put per key (one raft entry per object, as kube-apiserver creates them) when the memory rows matter; kine, which refuses a transaction of bare puts, is always loaded one Put per key")
	fs.Int64Var(&cfg.quotaBackendBytes, "etcd-quota-backend-bytes", 0, "with --compare: --quota-backend-bytes of the reference etcd and of kite alike, the database size that raises NOSPACE (0: their default, 2 GiB; negative: none). --keys 1000000 of 1 KiB needs more: its database alone is over 1 GiB before any workload writes, e.g. 8589934592")
	fs.IntVar(&cfg.memoryKeys, "memory-keys", 0, "with --compare: preload this many keys into a fresh server of each kind and report its resident memory")
	fs.BoolVar(&cfg.smoke, "smoke", false, "run every workload tiny (a few seconds in all) to prove the tool works; without --workloads: "+smokeWorkloads)
	fs.StringVar(&cfg.jsonPath, "json", "", "also write the JSON lines to this file")
	fs.StringVar(&cfg.datastore, "datastore", datastoreSQLite, "with --compare: kite's storage, sqlite (its data dir), postgres (a fresh database on --postgres-admin, dropped at the end), mysql (the same on --mysql-admin) or raftsql (a raft cluster of --members kite processes, against an etcd cluster of as many)")
	fs.IntVar(&cfg.members, "members", 1, "raftsql mode: members of kite's raft cluster and of the reference etcd cluster, each its own process, data dir and loopback ports; connections are spread over them round-robin (3 or 5 to survive the loss of one)")
	fs.IntVar(&cfg.failovers, "failovers", 5, "failover: how many times the leader of each cluster is killed (and restarted)")
	fs.StringVar(&cfg.postgresAdmin, "postgres-admin", testenv.DefaultPostgresAdmin, "postgres mode: a loopback postgres:// URL of a role that may create databases; the benchmark's databases are made from it (its password is never printed)")
	fs.StringVar(&cfg.mysqlAdmin, "mysql-admin", testenv.DefaultMySQLAdmin, "mysql mode: a loopback mysql://user[:password]@tcp(host:port)/ DSN of a MySQL or MariaDB account that may create databases; the benchmark's databases are made from it (its password is never printed)")
	fs.IntVar(&cfg.kiteServers, "kite-servers", 1, "postgres and mysql modes: kite servers sharing the one database, each with its own data dir and port; connections are spread over them round-robin")
	fs.StringVar(&cfg.kineBinary, "kine-binary", "", "postgres and mysql modes: add kine "+kineVersion+" as a second reference on its own fresh database; a kine binary, or \""+kineAuto+"\" to build it from its Go module (see \"How kine is built\" above)")
	fs.IntVar(&cfg.kineServers, "kine-servers", 1, "postgres and mysql modes: kine servers sharing kine's database (2 to measure kine's cross-server watch, which polls)")
	fs.StringVar(&cfg.kineCacheDir, "kine-cache", "", "where --kine-binary "+kineAuto+" keeps the kine it builds (default: $XDG_CACHE_HOME/kite-bench/kine-"+kineVersion+")")
	fs.StringVar(&profile, "profile", "", "comma-separated workload labels (or \"all\") during which to take a CPU profile of every kite server (started with --enable-pprof), and at whose end a heap profile, with --compare")
	fs.StringVar(&cfg.profileDir, "profile-dir", ".", "where --profile writes kite-WORKLOAD[-sN].pprof")
	fs.Usage = func() { usage(fs) }
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
	if endpoints != "" {
		cfg.endpoints = strings.Split(endpoints, ",")
	}
	if profile != "" {
		cfg.profile = map[string]bool{}
		for p := range strings.SplitSeq(profile, ",") {
			if p = strings.TrimSpace(p); p != "" {
				cfg.profile[p] = true
			}
		}
	}
	if cfg.smoke {
		applySmoke(cfg)
		if !flagGiven(fs, "workloads") {
			workloads = smokeWorkloads
		}
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
	cfg.conns = min(cfg.conns, max(2, cfg.kiteServers, cfg.kineServers, cfg.members)) // a connection to every server
	cfg.failovers = min(cfg.failovers, 2)
	cfg.watchers = 4
	cfg.events = 25
	cfg.memoryKeys = min(cfg.memoryKeys, 1000)
	cfg.deleteKeys = 0 // --total's 100
}

// flagGiven reports whether the command line set the flag name.
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
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
	case cfg.pacedRate <= 0:
		return errors.New("--paced-rate must be positive")
	case cfg.writeRate < 0 || cfg.deleteKeys < 0:
		return errors.New("--write-rate and --delete-keys must not be negative")
	case cfg.loadTxnOps < 1:
		return errors.New("--load-txn-ops must be at least 1")
	case cfg.quotaBackendBytes != 0 && !cfg.compare:
		return errors.New("--etcd-quota-backend-bytes needs --compare (it is a flag of the servers started here)")
	case cfg.datastore != datastoreSQLite && cfg.datastore != datastorePostgres && cfg.datastore != datastoreMySQL && cfg.datastore != datastoreRaftSQL:
		return fmt.Errorf("--datastore %q: want %s, %s, %s or %s", cfg.datastore, datastoreSQLite, datastorePostgres, datastoreMySQL, datastoreRaftSQL)
	case cfg.datastore != datastoreSQLite && !cfg.compare:
		return fmt.Errorf("--datastore %s needs --compare (it sets up the servers it measures)", cfg.datastore)
	case cfg.members < 1:
		return errors.New("--members must be at least 1")
	case cfg.members > 1 && cfg.datastore != datastoreRaftSQL:
		return errors.New("--members needs --datastore raftsql")
	case cfg.failovers < 1:
		return errors.New("--failovers must be at least 1")
	case hasWorkload(cfg, "failover") && (cfg.datastore != datastoreRaftSQL || cfg.members < 3):
		return fmt.Errorf("the failover workload kills the leader of a raft cluster, so it needs --compare --datastore raftsql --members 3 or more (got --datastore %s --members %d): with fewer than 3 members no quorum survives the leader", cfg.datastore, cfg.members)
	case cfg.kiteServers < 1 || cfg.kineServers < 1:
		return errors.New("--kite-servers and --kine-servers must be at least 1")
	case !onDatabaseServer(cfg) && (cfg.kiteServers > 1 || cfg.kineServers > 1 || cfg.kineBinary != ""):
		return errors.New("--kite-servers, --kine-servers and --kine-binary need --datastore postgres or mysql")
	case onDatabaseServer(cfg) && cfg.KiteBinary == "etcd":
		return fmt.Errorf("--kite-binary etcd cannot run on --datastore %s", cfg.datastore)
	case cfg.conns < max(cfg.kiteServers, cfg.kineServers, cfg.members):
		return errors.New("--conns must be at least --kite-servers, --kine-servers and --members (each server needs a connection)")
	case cfg.profile != nil && !cfg.compare:
		return errors.New("--profile needs --compare (it starts kite with --enable-pprof)")
	}
	if onDatabaseServer(cfg) {
		if err := testenv.CheckDatabaseAdmin(cfg.datastore, databaseAdmin(cfg)); err != nil {
			return err
		}
	}
	for _, ep := range cfg.endpoints {
		if err := testenv.CheckLoopback(ep); err != nil {
			return err
		}
	}
	return nil
}

// onDatabaseServer reports whether kite runs on a database server
// (postgres or mysql mode), where several servers may share its store.
func onDatabaseServer(cfg *config) bool {
	return cfg.datastore == datastorePostgres || cfg.datastore == datastoreMySQL
}

// databaseAdmin is the admin connection string of cfg's database-server
// mode.
func databaseAdmin(cfg *config) string {
	if cfg.datastore == datastoreMySQL {
		return cfg.mysqlAdmin
	}
	return cfg.postgresAdmin
}

// newDatabases connects to the database server of cfg's mode, which makes
// the fresh databases (named kite_bench_<kind>_<random>) the servers run on.
func newDatabases(ctx context.Context, cfg *config, log *slog.Logger) (testenv.Databases, error) {
	return testenv.NewDatabases(ctx, log, cfg.datastore, databaseAdmin(cfg), "kite_bench_")
}

// hasWorkload reports whether the run includes the workload name.
func hasWorkload(cfg *config, name string) bool {
	for _, s := range cfg.workloads {
		if s.name == name {
			return true
		}
	}
	return false
}

// usage prints what --help shows: the modes, how the kine reference is
// built, then every flag.
func usage(fs *flag.FlagSet) {
	w := fs.Output()
	fmt.Fprint(w, `kite-bench: Kubernetes-shaped load on etcd v3 endpoints.

  kite-bench --endpoints URL[,URL...] [flags]     measure running servers
  kite-bench --compare [flags]                    reference etcd and kite side by side, kite/etcd ratios
  kite-bench --compare --datastore postgres [--kite-servers N] [--kine-binary auto|PATH] [flags]
        kite on a fresh database of --postgres-admin (dropped at the end); with
        --kine-binary, kine `+kineVersion+` on another fresh database as a second
        reference, and kite/kine ratios. kine implements only what Kubernetes uses:
        a workload it cannot serve is reported "unsupported by kine" with its error.
  kite-bench --compare --datastore mysql [--kite-servers N] [--kine-binary auto|PATH] [flags]
        the same on the MySQL or MariaDB server of --mysql-admin.
  kite-bench --compare --datastore raftsql --members N [flags]
        kite as a raft cluster of N members against a reference etcd cluster
        of N members, each member its own process; add the failover workload
        (N >= 3) to time the recovery from a kill -9 of the leader.
  kite-bench build-kine [--dir DIR]               build kine, print the binary's path

With --kite-servers N (postgres and mysql modes) the N kite servers share one database
and the connections are spread over them round-robin (connection i talks to
server i mod N; client i uses connection i mod --conns). The watch-remote
workload measures watch delivery across servers: one writer on the first
server puts --events keys at --watch-rate (100/s by default), W watchers
(watch-remote@W, default --clients) on the other servers; it reports the
latency from each put's acknowledgement to each watcher's receipt, and every
event missed or delivered twice. On a single server it runs there, and says so.

In raftsql mode (--datastore raftsql --members N) kite's members are started
with etcd's clustering flags (--initial-cluster ... --initial-cluster-state
new), the reference etcd's likewise, both with etcd's default heartbeat
(100 ms) and election timeout (1 s); connection i talks to member i mod N.
The RSS columns are the sum over the members; a further table shows each
member's and the largest. The failover workload (not in the defaults) kills
the leader (found through Maintenance Status) with SIGKILL --failovers
times per cluster, and reports for each kill the time until a write through
a surviving member succeeded, the time until the survivors agreed on a new
leader, and the time the restarted member took to serve again and catch up
with the revision of a write made after its restart began. Its latency
columns are the write times.

How kine is built: kine is not in kite's go.mod. "--kine-binary auto" (or
build-kine) runs "GOBIN=DIR go install github.com/k3s-io/kine@`+kineVersion+`" with
the go command on $PATH, into --kine-cache, and reuses that binary afterwards.
Should kine's go.mod carry replace directives (go install refuses those), it
builds in a throwaway module instead: go mod init, the same replace
directives, go get github.com/k3s-io/kine@`+kineVersion+`, go build.

Flags:
`)
	fs.PrintDefaults()
}
