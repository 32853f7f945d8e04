package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/kite-db/kite/internal/testenv"
)

// serverProc is a server process this run started: the reference etcd or
// kite, each in its own temporary directory (data and log), with what
// kite-bench watches of it.
type serverProc struct {
	*testenv.ToolServer
	log *slog.Logger
	// exitLogged: the log of an unexpected exit was printed (only by the
	// run's goroutine).
	exitLogged bool
	// starts counts the process's starts: after a restart its peak memory
	// (VmHWM) covers only the time since.
	starts int
	// rssSeen is the largest VmRSS read of the process since its last
	// start (only by the run's goroutine).
	rssSeen int64
}

// member is where one server process lives: its name, data dir and client
// URL, and for a member of a raft cluster (raftsql mode) its peer URL and
// the cluster it bootstraps with. The etcd-server subcommand takes the
// same fields as flags.
type member struct {
	name, dataDir, clientURL string
	peerURL, initialCluster  string // raft members only
	token                    string // raft members only; "" keeps etcd's default
}

// serverKind says how to start one kind of server on a data dir and URL.
type serverKind struct {
	name string
	argv func(m member) []string
	// servers is how many processes serve one store (postgres and mysql modes: kite
	// and kine servers sharing one database); 0 means 1.
	servers int
	// members, when above 0, makes the kind a raft cluster of that many
	// members (raftsql mode), each a process with its own data dir, client
	// and peer port, bootstrapped together (raftsql.go).
	members int
	// dbEnv, when set, gives every fresh start of this kind a fresh
	// database (Postgres or MySQL), whose DSN each server process finds in this
	// environment variable (so it never shows in a process listing).
	dbEnv string
	// partial marks a server that implements only part of the etcd API
	// (kine): a workload that fails on it is reported as unsupported, not
	// as a failure of the run.
	partial bool
}

// etcdKind re-executes this binary's hidden etcd-server subcommand: one
// process, or in raftsql mode (cfg.members) a cluster of that many.
func etcdKind(name string, cfg *config) (serverKind, error) {
	self, err := os.Executable()
	if err != nil {
		return serverKind{}, fmt.Errorf("find own executable for the reference etcd: %w", err)
	}
	k := serverKind{name: name, argv: func(m member) []string {
		argv := []string{self, testenv.EtcdServerCommand, "--name", m.name, "--data-dir", m.dataDir, "--listen", m.clientURL}
		if m.initialCluster != "" {
			argv = append(argv, "--listen-peer", m.peerURL, "--initial-cluster", m.initialCluster,
				"--initial-cluster-token", m.token)
		}
		if cfg.quotaBackendBytes != 0 {
			argv = append(argv, "--quota-backend-bytes", strconv.FormatInt(cfg.quotaBackendBytes, 10))
		}
		return argv
	}}
	if cfg.datastore == datastoreRaftSQL {
		k.members = cfg.members
	}
	return k, nil
}

// kiteKind runs the kite binary with the flags issue 4 fixes. binary "etcd"
// stands a second reference etcd in for kite, which proves the tool on
// etcd-vs-etcd (every ratio should then be near 1). In postgres and mysql modes kite
// reads --datastore-endpoint from KITE_DATASTORE_ENDPOINT (kite fills any
// flag not on its command line from KITE_<FLAG>), and --kite-servers
// servers share the database. In raftsql mode each member is started
// with etcd's own clustering flags (which select raftsql), as an etcd
// member would be, and etcd's defaults for heartbeat and election timeout.
func kiteKind(cfg *config) (serverKind, error) {
	if cfg.KiteBinary == "etcd" {
		return etcdKind("kite", cfg)
	}
	path, err := testenv.FindKite(cfg.KiteBinary)
	if err != nil {
		return serverKind{}, err
	}
	k := serverKind{name: "kite", servers: 1, argv: func(m member) []string {
		name := "kite-bench"
		if m.initialCluster != "" {
			name = m.name // the member's name in --initial-cluster
		}
		argv := []string{path, "--name", name, "--data-dir", m.dataDir,
			"--listen-client-urls", m.clientURL, "--advertise-client-urls", m.clientURL, "--log-level", "warn"}
		if m.initialCluster != "" {
			argv = append(argv, "--listen-peer-urls", m.peerURL, "--initial-advertise-peer-urls", m.peerURL,
				"--initial-cluster", m.initialCluster, "--initial-cluster-state", "new",
				"--initial-cluster-token", m.token)
		}
		if cfg.profile != nil {
			argv = append(argv, "--enable-pprof")
		}
		if cfg.quotaBackendBytes != 0 {
			// The same quota as the reference's: kite's flag is etcd's.
			argv = append(argv, "--quota-backend-bytes", strconv.FormatInt(cfg.quotaBackendBytes, 10))
		}
		return argv
	}}
	switch cfg.datastore {
	case datastorePostgres, datastoreMySQL:
		k.servers = cfg.kiteServers
		k.dbEnv = "KITE_DATASTORE_ENDPOINT"
	case datastoreRaftSQL:
		k.members = cfg.members
	}
	return k, nil
}

// cluster is the servers of one kind that share one store: one process,
// in postgres and mysql modes several on one database, in raftsql mode the members
// of a raft cluster.
type cluster struct {
	kind  serverKind
	procs []*serverProc
}

// startCluster starts kind's servers, on a fresh database when kind needs
// one (created on db, dropped by db.dropAll at the end of the run).
func startCluster(ctx context.Context, cfg *config, log *slog.Logger, kind serverKind, db dbAdmin) (*cluster, error) {
	if kind.members > 0 {
		return startRaftCluster(ctx, cfg, log, kind)
	}
	c := &cluster{kind: kind}
	var env []string
	var secret string
	if kind.dbEnv != "" {
		if db == nil {
			return nil, fmt.Errorf("%s needs a database server (--datastore postgres or mysql)", kind.name)
		}
		dsn, password, err := db.createDatabase(ctx, kind.name)
		if err != nil {
			return nil, err
		}
		env = []string{kind.dbEnv + "=" + dsn}
		secret = password
	}
	n := max(kind.servers, 1)
	for i := range n {
		name := kind.name
		if n > 1 {
			name = fmt.Sprintf("%s-%d", kind.name, i)
		}
		p, err := startServer(ctx, cfg, log, kind, name, env, secret)
		if err != nil {
			c.stop()
			return nil, err
		}
		c.procs = append(c.procs, p)
	}
	return c, nil
}

// endpoints returns the client URL of each server.
func (c *cluster) endpoints() []string {
	eps := make([]string, len(c.procs))
	for i, p := range c.procs {
		eps[i] = p.Endpoint
	}
	return eps
}

// rssNodes is the resident memory of each of the cluster's servers (the
// database server's not counted), in the order of c.procs.
func (c *cluster) rssNodes() ([]int64, error) {
	nodes, err := c.statusNodes(statusRSS)
	if err != nil {
		return nil, err
	}
	for i, p := range c.procs {
		p.rssSeen = max(p.rssSeen, nodes[i])
	}
	return nodes, nil
}

// peakRSSNodes is the peak resident memory of each of the cluster's
// servers since it started, in the order of c.procs: VmHWM, or the largest
// VmRSS read before when that is more. The kernel's high-water mark is
// taken from approximate per-CPU counters and only when memory is
// unmapped, so it can come out a few hundred KiB below a VmRSS read
// earlier, and a peak must not be below what was seen.
func (c *cluster) peakRSSNodes() ([]int64, error) {
	nodes, err := c.statusNodes(statusPeakRSS)
	if err != nil {
		return nil, err
	}
	for i, p := range c.procs {
		nodes[i] = max(nodes[i], p.rssSeen)
	}
	return nodes, nil
}

// statusNodes reads one memory field of /proc/PID/status for each server.
func (c *cluster) statusNodes(field string) ([]int64, error) {
	nodes := make([]int64, len(c.procs))
	for i, p := range c.procs {
		r, err := testenv.StatusBytes(p.Process().Pid(), field)
		if err != nil {
			return nil, err
		}
		nodes[i] = r
	}
	return nodes, nil
}

// restarted names the cluster's servers that were started more than once.
func (c *cluster) restarted() []string {
	var names []string
	for _, p := range c.procs {
		if p.starts > 1 {
			names = append(names, p.Name)
		}
	}
	return names
}

// exited returns an error naming every server of the cluster that is no
// longer running, with the line of its log that says why, or nil. The end
// of each such log is logged once, when the exit is first noticed.
func (c *cluster) exited() error {
	var errs []error
	for _, p := range c.procs {
		select {
		case <-p.Exited():
			if !p.exitLogged {
				p.exitLogged = true
				p.log.Error("server exited", "server", p.Name, "error", p.Err(), "log", p.LogTail())
			}
			errs = append(errs, fmt.Errorf("%s exited (%v): %s", p.Name, p.Err(), testenv.ExitReason(p.LogTail())))
		default:
		}
	}
	return errors.Join(errs...)
}

func (c *cluster) stop() {
	for _, p := range c.procs {
		p.stop()
	}
}

// restartExited starts again, on the same data dir, port and database,
// every server of the cluster that has exited. Only partial references
// (kine) are restarted: a reference that crashed under one workload should
// still be measured on the next, while a kite crash is a finding that
// stays visible.
func (c *cluster) restartExited(ctx context.Context, cfg *config) error {
	for _, p := range c.procs {
		select {
		case <-p.Exited():
		default:
			continue
		}
		p.log.Warn("restarting server that exited", "server", p.Name, "error", p.Err())
		if err := p.launch(ctx, cfg.StartupWait); err != nil {
			return fmt.Errorf("restart %s: %w", p.Name, err)
		}
	}
	return nil
}

// startServer starts one server of kind on a fresh temporary data dir and
// a free loopback port, and waits until it answers. env is added to the
// process's environment; secret (a password) is masked in any log tail
// kite-bench prints.
func startServer(ctx context.Context, cfg *config, log *slog.Logger, kind serverKind, name string, env []string, secret string) (*serverProc, error) {
	port, err := testenv.FreePort()
	if err != nil {
		return nil, err
	}
	p, err := newServerProc(cfg, log, name, port)
	if err != nil {
		return nil, err
	}
	p.Env, p.Secret = env, secret
	p.Argv = kind.argv(member{name: name, dataDir: p.DataDir(), clientURL: p.Endpoint})
	if err := p.launch(ctx, cfg.StartupWait); err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

// newServerProc makes the temporary directory of a server that will serve
// clients on the loopback port; it starts nothing.
func newServerProc(cfg *config, log *slog.Logger, name string, port int) (*serverProc, error) {
	ts, err := testenv.NewToolServer(log, cfg.WorkDir, "kite-bench-", name, port)
	if err != nil {
		return nil, err
	}
	return &serverProc{ToolServer: ts, log: log}, nil
}

// launch starts the server's process (again, after an exit) with a fresh
// log, and waits until it answers.
func (p *serverProc) launch(ctx context.Context, timeout time.Duration) error {
	if err := p.start(); err != nil {
		return err
	}
	return p.WaitReady(ctx, timeout)
}

// start starts the server's process (again, after an exit) with a fresh
// log; it does not wait for it to answer.
func (p *serverProc) start() error {
	p.exitLogged = false
	if err := p.Start(); err != nil {
		return err
	}
	p.starts++
	p.rssSeen = 0
	return nil
}

// Fields of /proc/PID/status that kite-bench reads.
const (
	statusRSS     = testenv.StatusRSS
	statusPeakRSS = testenv.StatusPeakRSS
)

// stop asks the server to shut down (SIGTERM), kills it after 15 s, and
// removes its directory. An unclean exit is logged with the log's tail,
// since a crash under load is a finding, not noise.
func (p *serverProc) stop() {
	p.Halt()
	if err := p.Err(); err != nil && !p.exitLogged {
		var exitErr *exec.ExitError
		if !errors.As(err, &exitErr) || exitErr.ExitCode() != 0 {
			p.log.Warn("server exited uncleanly", "server", p.Name, "error", err, "log", p.LogTail())
		}
	}
	p.Remove()
}

// checkLoopback refuses endpoints off this machine: a benchmark generates
// enough load to hurt a server someone depends on.
func checkLoopback(endpoint string) error {
	host := endpoint
	if u, err := url.Parse(endpoint); err == nil && u.Host != "" {
		host = u.Host
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("endpoint %q is not a loopback address; kite-bench only loads this machine", endpoint)
}
