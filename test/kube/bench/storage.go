package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"

	"github.com/kite-db/kite/internal/pgadmin"
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
	name    string
	servers []*testenv.ToolServer
	// drop, when set, drops the database the servers ran on, after they stopped.
	drop func(ctx context.Context) error
	log  *slog.Logger
}

// endpoints is the --etcd-servers of kube-apiserver.
func (s *storage) endpoints() string {
	eps := make([]string, len(s.servers))
	for i, p := range s.servers {
		eps[i] = p.Endpoint
	}
	return strings.Join(eps, ",")
}

// cpuSeconds is the user and system CPU the servers have used since they
// started, summed.
func (s *storage) cpuSeconds() (float64, error) {
	var sum float64
	for _, p := range s.servers {
		c, err := testenv.CPUSeconds(p.Process().Pid())
		if err != nil {
			return 0, err
		}
		sum += c
	}
	return sum, nil
}

// peakRSS is the servers' peak resident memory (VmHWM), summed: the
// memory the storage needed at its worst, each member at its own worst.
func (s *storage) peakRSS() (int64, error) {
	var sum int64
	for _, p := range s.servers {
		b, err := testenv.StatusBytes(p.Process().Pid(), testenv.StatusPeakRSS)
		if err != nil {
			return 0, err
		}
		sum += b
	}
	return sum, nil
}

// exited says which server is no longer running, or nil.
func (s *storage) exited() error {
	var errs []error
	for _, p := range s.servers {
		errs = append(errs, p.ExitErr())
	}
	return errors.Join(errs...)
}

// stop stops every server, removes their directories unless keep, and
// drops the database.
func (s *storage) stop(keep bool) {
	for _, p := range s.servers {
		p.Halt()
		if !keep {
			p.Remove()
		}
	}
	if s.drop != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := s.drop(ctx); err != nil {
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
	kiteArgv := func(member, dataDir, url string) []string {
		argv := []string{bins.kite, "--name", member, "--data-dir", dataDir,
			"--listen-client-urls", url, "--advertise-client-urls", url, "--log-level", "warn"}
		return append(argv, cfg.kiteFlags...)
	}
	etcdArgv := func(member, dataDir, url string) []string {
		return []string{bins.self, testenv.EtcdServerCommand, "--name", member, "--data-dir", dataDir, "--listen", url}
	}
	var err error
	switch name {
	case "etcd":
		err = s.single(ctx, cfg, func(ts *testenv.ToolServer) []string { return etcdArgv("etcd", ts.DataDir(), ts.Endpoint) }, nil)
	case "sqlite":
		err = s.single(ctx, cfg, func(ts *testenv.ToolServer) []string { return kiteArgv("kite", ts.DataDir(), ts.Endpoint) }, nil)
	case "postgres", "mysql":
		var dsn string
		if dsn, err = s.createDatabase(ctx, cfg, name, "kite"); err == nil {
			err = s.single(ctx, cfg, func(ts *testenv.ToolServer) []string { return kiteArgv("kite", ts.DataDir(), ts.Endpoint) },
				// kite fills a flag not on its command line from KITE_<FLAG>:
				// the DSN stays out of the process listing.
				[]string{"KITE_DATASTORE_ENDPOINT=" + dsn})
		}
	case "kine-sqlite":
		err = s.single(ctx, cfg, func(ts *testenv.ToolServer) []string {
			// kine's own default DSN, in the server's data dir instead of ./db.
			dsn := "sqlite://" + filepath.Join(ts.DataDir(), "state.db") + "?_journal=WAL&cache=shared&_busy_timeout=30000&_txlock=immediate"
			if err := os.MkdirAll(ts.DataDir(), 0o755); err != nil {
				log.Warn("kine data dir", "error", err)
			}
			return kineArgv(bins.kine, ts.Endpoint, dsn)
		}, nil)
	case "kine-postgres", "kine-mysql":
		var dsn string
		if dsn, err = s.createDatabase(ctx, cfg, strings.TrimPrefix(name, "kine-"), "kine"); err == nil {
			err = s.single(ctx, cfg, func(ts *testenv.ToolServer) []string { return kineArgv(bins.kine, ts.Endpoint, "") },
				[]string{"KINE_ENDPOINT=" + dsn})
		}
	case "etcd3":
		err = s.cluster(ctx, cfg, func(m raftMember) []string {
			return append(etcdArgv(m.name, m.dataDir, m.clientURL),
				"--listen-peer", m.peerURL, "--initial-cluster", m.initialCluster, "--initial-cluster-token", m.token)
		})
	case "raftsql":
		// etcd's clustering flags are what select raftsql.
		err = s.cluster(ctx, cfg, func(m raftMember) []string {
			return append(kiteArgv(m.name, m.dataDir, m.clientURL),
				"--listen-peer-urls", m.peerURL, "--initial-advertise-peer-urls", m.peerURL,
				"--initial-cluster", m.initialCluster, "--initial-cluster-state", "new", "--initial-cluster-token", m.token)
		})
	default:
		err = fmt.Errorf("unknown storage %q (want one of %s)", name, strings.Join(storageNames, ", "))
	}
	if err != nil {
		s.stop(cfg.keep)
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	return s, nil
}

// kineArgv serves etcd clients on url; its metrics listener (every
// interface's port 8080 by default) is switched off.
func kineArgv(kine, url, endpoint string) []string {
	host := strings.TrimPrefix(url, "http://")
	argv := []string{kine, "--listen-address", host, "--metrics-bind-address", "0"}
	if endpoint != "" {
		argv = append(argv, "--endpoint", endpoint)
	}
	return argv
}

// single starts one server whose command line argv makes, with env added
// to its environment.
func (s *storage) single(ctx context.Context, cfg *config, argv func(*testenv.ToolServer) []string, env []string) error {
	port, err := testenv.FreePort()
	if err != nil {
		return err
	}
	ts, err := testenv.NewToolServer(s.log, cfg.workDir, "", s.name, port)
	if err != nil {
		return err
	}
	s.servers = append(s.servers, ts)
	ts.Argv, ts.Env = argv(ts), env
	return ts.Launch(ctx, cfg.startupWait)
}

// raftMember is one member of a three-member cluster.
type raftMember struct {
	name, dataDir, clientURL, peerURL, initialCluster, token string
}

// cluster starts three members bootstrapped together, each with its own
// data dir, client and peer port, and a cluster token of its own so no
// member of another run can join.
func (s *storage) cluster(ctx context.Context, cfg *config, argv func(raftMember) []string) error {
	const n = 3
	ports, err := testenv.FreePorts(2 * n)
	if err != nil {
		return err
	}
	var id [4]byte
	if _, err := rand.Read(id[:]); err != nil {
		return fmt.Errorf("cluster token: %w", err)
	}
	token := "kite-kube-bench-" + s.name + "-" + hex.EncodeToString(id[:])
	members := make([]raftMember, n)
	var peers []string
	for i := range n {
		ts, err := testenv.NewToolServer(s.log, cfg.workDir, "", fmt.Sprintf("%s-%d", s.name, i), ports[2*i])
		if err != nil {
			return err
		}
		s.servers = append(s.servers, ts)
		peer := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[2*i+1]))
		members[i] = raftMember{name: ts.Name, dataDir: ts.DataDir(), clientURL: ts.Endpoint, peerURL: peer, token: token}
		peers = append(peers, ts.Name+"="+peer)
	}
	// Every member first, then the waits: none serves before a quorum runs.
	for i, ts := range s.servers {
		members[i].initialCluster = strings.Join(peers, ",")
		ts.Argv = argv(members[i])
		if err := ts.Start(); err != nil {
			return err
		}
	}
	for _, ts := range s.servers {
		if err := ts.WaitReady(ctx, cfg.startupWait); err != nil {
			return err
		}
	}
	return nil
}

// createDatabase makes a fresh database on the Postgres or MariaDB server
// (kind "postgres" or "mysql") for one server, to be dropped by s.stop, and
// returns its DSN.
func (s *storage) createDatabase(ctx context.Context, cfg *config, kind, purpose string) (string, error) {
	// Lower case (pgadmin.NewName): kine folds its database name to lower case.
	name, err := pgadmin.NewName("kite_kube_bench_"+purpose+"_", 4)
	if err != nil {
		return "", err
	}
	if kind == "postgres" {
		return s.createPostgres(ctx, cfg.postgresAdmin, name)
	}
	return s.createMySQL(ctx, cfg.mysqlAdmin, name)
}

func (s *storage) createPostgres(ctx context.Context, admin, name string) (string, error) {
	connect := func(ctx context.Context) (*pgx.Conn, error) {
		ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			return nil, fmt.Errorf("connect to postgres (--postgres-admin): %w", err)
		}
		return conn, nil
	}
	conn, err := connect(ctx)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.Background())
	if err := pgadmin.Create(ctx, conn, name); err != nil {
		return "", err
	}
	s.log.Info("created database", "storage", s.name, "database", name)
	s.drop = func(ctx context.Context) error {
		conn, err := connect(ctx)
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		if err := pgadmin.Drop(ctx, conn, name); err != nil {
			return err
		}
		s.log.Info("dropped database", "database", name)
		return nil
	}
	return pgadmin.WithDatabase(admin, name)
}

func (s *storage) createMySQL(ctx context.Context, admin, name string) (string, error) {
	mc, err := gomysql.ParseDSN(strings.TrimPrefix(admin, "mysql://"))
	if err != nil {
		return "", fmt.Errorf("--mysql-admin: %w", err)
	}
	mc.DBName = ""
	connect := func(ctx context.Context) (*sql.DB, error) {
		connector, err := gomysql.NewConnector(mc)
		if err != nil {
			return nil, fmt.Errorf("--mysql-admin: %w", err)
		}
		db := sql.OpenDB(connector)
		ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		if err := db.PingContext(ctx); err != nil {
			db.Close()
			return nil, fmt.Errorf("connect to mysql (--mysql-admin): %w", err)
		}
		return db, nil
	}
	db, err := connect(ctx)
	if err != nil {
		return "", err
	}
	defer db.Close()
	// The name is ours: lower-case letters, digits and underscores.
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	s.log.Info("created database", "storage", s.name, "database", name)
	s.drop = func(ctx context.Context) error {
		db, err := connect(ctx)
		if err != nil {
			return err
		}
		defer db.Close()
		if _, err := db.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name); err != nil {
			return fmt.Errorf("drop database %s: %w", name, err)
		}
		s.log.Info("dropped database", "database", name)
		return nil
	}
	user := mc.User
	if mc.Passwd != "" {
		user += ":" + mc.Passwd
	}
	return "mysql://" + user + "@tcp(" + mc.Addr + ")/" + name, nil
}
