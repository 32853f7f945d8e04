package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/kite-db/kite/internal/testenv"
)

// soakConns is the connections to each server: connection 0 carries the
// watch streams, the others the drivers.
const soakConns = 4

// soakProc is one server under the soak: a single process (the reference
// etcd or kite on SQLite) in a temporary directory of its own (data and
// log), removed by stop.
type soakProc struct {
	name     string
	endpoint string
	dir      string
	logPath  string
	proc     *testenv.Process
	log      *slog.Logger
}

// soakArgv is the command line of the named server on a data dir and
// client URL: the reference etcd (this binary's etcd-server), or kite
// with the flags kite-bench gives it. --kite-binary etcd stands a second
// reference etcd in for kite, which proves the soak on etcd-vs-etcd.
func soakArgv(name string, cfg *soakConfig) (func(dataDir, clientURL string) []string, error) {
	if name == soakEtcd || cfg.KiteBinary == "etcd" {
		self, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find own executable for the reference etcd: %w", err)
		}
		return func(dataDir, clientURL string) []string {
			return []string{self, testenv.EtcdServerCommand, "--name", name, "--data-dir", dataDir, "--listen", clientURL}
		}, nil
	}
	path, err := testenv.FindKite(cfg.KiteBinary)
	if err != nil {
		return nil, err
	}
	return func(dataDir, clientURL string) []string {
		return []string{path, "--name", "kite-soak", "--data-dir", dataDir,
			"--listen-client-urls", clientURL, "--advertise-client-urls", clientURL, "--log-level", "warn"}
	}, nil
}

// startSoakProc starts the named server on a fresh temporary data dir and
// a free loopback port, and waits until it answers.
func startSoakProc(ctx context.Context, cfg *soakConfig, log *slog.Logger, name string, argv func(dataDir, clientURL string) []string) (*soakProc, error) {
	port, err := testenv.FreePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(cfg.WorkDir, "kite-soak-"+name+"-")
	if err != nil {
		return nil, fmt.Errorf("create data dir for %s: %w", name, err)
	}
	p := &soakProc{
		name:     name,
		endpoint: "http://127.0.0.1:" + strconv.Itoa(port),
		dir:      dir,
		logPath:  filepath.Join(dir, "server.log"),
		log:      log,
	}
	logFile, err := os.Create(p.logPath)
	if err != nil {
		p.stop()
		return nil, fmt.Errorf("create log of %s: %w", name, err)
	}
	// The child has its own descriptor of the log.
	defer logFile.Close()
	p.proc, err = testenv.Start(testenv.Command{Argv: argv(p.dataDir(), p.endpoint), Out: logFile})
	if err != nil {
		p.stop()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	log.Info("started server", "server", name, "pid", p.proc.Pid(), "endpoint", p.endpoint, "dir", dir)
	if err := p.waitReady(ctx, cfg.StartupWait); err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

// dataDir is the server's data directory, beside its log.
func (p *soakProc) dataDir() string { return filepath.Join(p.dir, "data") }

// waitReady waits until the server answers, the process exits, or
// timeout passes.
func (p *soakProc) waitReady(ctx context.Context, timeout time.Duration) error {
	if err := testenv.WaitReady(ctx, p.endpoint, p.proc, timeout); err != nil {
		return fmt.Errorf("%s %w; its log ends:\n%s", p.name, err, p.logTail())
	}
	return nil
}

// exitErr says why the server is no longer running, with the line of its
// log that best says why (testenv.ExitReason), or is nil while it runs.
func (p *soakProc) exitErr() error {
	select {
	case <-p.proc.Exited():
	default:
		return nil
	}
	return fmt.Errorf("%s exited (%v): %s", p.name, p.proc.Err(), testenv.ExitReason(p.logTail()))
}

// stop asks the server to shut down (SIGTERM), kills it after 15 s, and
// removes its directory.
func (p *soakProc) stop() {
	if p.proc != nil && p.proc.Stop(15*time.Second) {
		p.log.Warn("server ignored SIGTERM for 15s; killed it", "server", p.name)
	}
	if err := os.RemoveAll(p.dir); err != nil {
		p.log.Warn("remove server dir", "dir", p.dir, "error", err)
	}
}

// logTail returns the last lines of the server's log.
func (p *soakProc) logTail() string { return testenv.LogFileTail(p.logPath, 20) }

// target is a server's connections, each its own gRPC channel.
type target struct {
	name  string
	conns []*clientv3.Client
}

// connect opens n connections to endpoint.
func connect(name, endpoint string, n int) (*target, error) {
	t := &target{name: name}
	for range n {
		c, err := clientv3.New(clientv3.Config{
			Endpoints:   []string{endpoint},
			DialTimeout: 5 * time.Second,
			// clientv3 logs every retry at warn; the soak counts errors itself.
			Logger: zap.NewNop(),
		})
		if err != nil {
			t.close()
			return nil, fmt.Errorf("connect to %s: %w", name, err)
		}
		t.conns = append(t.conns, c)
	}
	return t, nil
}

func (t *target) close() {
	for _, c := range t.conns {
		c.Close()
	}
}
