package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/kite-db/kite/internal/testenv"
)

// soakConns is the connections to each server: connection 0 carries the
// watch streams, the others the drivers.
const soakConns = 4

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

// startSoakProc starts the named server (the reference etcd, or kite on
// SQLite) on a fresh temporary data dir and a free loopback port, and
// waits until it answers.
func startSoakProc(ctx context.Context, cfg *soakConfig, log *slog.Logger, name string, argv func(dataDir, clientURL string) []string) (*testenv.ToolServer, error) {
	port, err := testenv.FreePort()
	if err != nil {
		return nil, err
	}
	p, err := testenv.NewToolServer(log, cfg.WorkDir, "kite-soak-", name, port)
	if err != nil {
		return nil, err
	}
	p.Argv = argv(p.DataDir(), p.Endpoint)
	if err := p.Launch(ctx, cfg.StartupWait); err != nil {
		p.Stop()
		return nil, err
	}
	return p, nil
}

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
