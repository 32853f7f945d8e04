package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/kite-db/kite/internal/testenv"
)

// The storages --storage may name.
var storageNames = []string{
	"etcd", "etcd3", "sqlite", "postgres", "mysql", "raftsql",
	"kine-sqlite", "kine-postgres", "kine-mysql",
}

// reference is the row a storage's ratios are taken against: kine against
// kite on the same database, raftsql against a raft cluster of etcd, every
// other one against a single etcd.
func reference(name string, have map[string]bool) string {
	switch {
	case strings.HasPrefix(name, "kine-") && have[strings.TrimPrefix(name, "kine-")]:
		return strings.TrimPrefix(name, "kine-")
	case name == "raftsql" && have["etcd3"]:
		return "etcd3"
	case name != "etcd" && have["etcd"]:
		return "etcd"
	}
	return ""
}

// storage is the processes one kube-apiserver stores into: one server, or
// the three members of a raft cluster. Their CPU and memory are what the
// benchmark charges to the storage; a database server (Postgres, MariaDB)
// behind kite or kine is not counted, since it is not a process of this run.
type storage struct {
	name string
	*testenv.Cluster
	// dbs, when set, made the database the servers ran on; it is dropped
	// after they stopped.
	dbs testenv.Databases
	log *slog.Logger
}

// endpoints is the --etcd-servers of kube-apiserver.
func (s *storage) endpoints() string { return strings.Join(s.Endpoints(), ",") }

// cpuSeconds is the user and system CPU the servers have used since they
// started, summed.
func (s *storage) cpuSeconds() (float64, error) {
	cpu, err := s.CPUSeconds()
	return testenv.Sum(cpu), err
}

// peakRSS is the servers' peak resident memory (VmHWM), summed: the
// memory the storage needed at its worst, each member at its own worst.
func (s *storage) peakRSS() (int64, error) {
	peak, err := s.PeakRSS()
	return testenv.Sum(peak), err
}

// stop stops every server, removes their directories unless keep, and
// drops the database.
func (s *storage) stop(keep bool) {
	if s.Cluster != nil {
		s.Halt()
		if !keep {
			s.Remove()
		}
	}
	s.dropDatabase()
}

// dropDatabase drops the database the servers ran on, if they had one.
func (s *storage) dropDatabase() {
	if s.dbs != nil {
		if err := s.dbs.DropAll(); err != nil {
			s.log.Warn("drop database", "storage", s.name, "error", err)
		}
	}
}

// binaries are the storage servers' executables.
type binaries struct {
	self, kite, kine string
}

// startStorage starts the storage name on free loopback ports and waits
// until every server answers.
func startStorage(ctx context.Context, cfg *config, log *slog.Logger, bins binaries, name string) (*storage, error) {
	s := &storage{name: name, log: log}
	spec := testenv.ClusterSpec{Name: name, WorkDir: cfg.workDir, TokenPrefix: "kite-kube-bench-", StartupWait: cfg.startupWait, Keep: cfg.keep}
	kiteArgv := func(m testenv.Member) []string {
		if m.InitialCluster == "" {
			m.Name = "kite"
		}
		return append(testenv.KiteArgv(bins.kite, m), cfg.kiteFlags...)
	}
	etcdArgv := func(m testenv.Member) []string {
		if m.InitialCluster == "" {
			m.Name = "etcd"
		}
		return testenv.EtcdArgv(bins.self, m)
	}
	var err error
	switch name {
	case "etcd", "etcd3":
		spec.Argv = etcdArgv
	case "sqlite", "raftsql":
		// etcd's clustering flags are what select raftsql.
		spec.Argv = kiteArgv
	case "postgres", "mysql":
		spec.Argv = kiteArgv
		// kite fills a flag not on its command line from KITE_<FLAG>: the
		// DSN stays out of the process listing.
		err = s.createDatabase(ctx, cfg, &spec, name, "kite", "KITE_DATASTORE_ENDPOINT")
	case "kine-sqlite":
		spec.Argv = func(m testenv.Member) []string {
			// kine's own default DSN, in the server's data dir instead of ./db.
			dsn := "sqlite://" + filepath.Join(m.DataDir, "state.db") + "?_journal=WAL&cache=shared&_busy_timeout=30000&_txlock=immediate"
			if err := os.MkdirAll(m.DataDir, 0o755); err != nil {
				log.Warn("kine data dir", "error", err)
			}
			return testenv.KineArgv(bins.kine, m.ClientURL, dsn)
		}
	case "kine-postgres", "kine-mysql":
		spec.Argv = func(m testenv.Member) []string { return testenv.KineArgv(bins.kine, m.ClientURL, "") }
		err = s.createDatabase(ctx, cfg, &spec, strings.TrimPrefix(name, "kine-"), "kine", "KINE_ENDPOINT")
	default:
		err = fmt.Errorf("unknown storage %q (want one of %s)", name, strings.Join(storageNames, ", "))
	}
	if name == "etcd3" || name == "raftsql" {
		spec.Members = 3
	}
	if err == nil {
		s.Cluster, err = testenv.StartCluster(ctx, log, spec)
	}
	if err != nil {
		s.dropDatabase()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	return s, nil
}

// createDatabase makes a fresh database on the Postgres or MariaDB server
// (kind "postgres" or "mysql") for the servers of spec, who find its DSN
// in the environment variable env; s.stop drops it.
func (s *storage) createDatabase(ctx context.Context, cfg *config, spec *testenv.ClusterSpec, kind, purpose, env string) error {
	admin := cfg.postgresAdmin
	if kind == testenv.DatabaseMySQL {
		admin = cfg.mysqlAdmin
	}
	dbs, err := testenv.NewDatabases(ctx, s.log, kind, admin, "kite_kube_bench_")
	if err != nil {
		return err
	}
	s.dbs = dbs
	d, err := dbs.Create(ctx, purpose)
	if err != nil {
		return err
	}
	spec.Env, spec.Secret = []string{env + "=" + d.DSN}, d.Password
	return nil
}
