package main

import (
	"context"
	"fmt"
	"log/slog"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kite-db/kite/internal/testenv"
)

// soakConns is the connections to each server: connection 0 carries the
// watch streams, the others the drivers.
const soakConns = 4

// soakArgv is the command line of the named server: the reference etcd
// (this binary's etcd-server), or kite with the flags kite-bench gives it
// (testenv.KiteArgv). --kite-binary etcd stands a second reference etcd
// in for kite, which proves the soak on etcd-vs-etcd.
func soakArgv(name string, cfg *soakConfig) (func(testenv.Member) []string, error) {
	if name == soakEtcd || cfg.KiteBinary == "etcd" {
		self, err := testenv.EtcdServerBinary()
		if err != nil {
			return nil, err
		}
		return func(m testenv.Member) []string { return testenv.EtcdArgv(self, m) }, nil
	}
	path, err := testenv.FindKite(cfg.KiteBinary)
	if err != nil {
		return nil, err
	}
	return func(m testenv.Member) []string {
		m.Name = "kite-soak"
		return testenv.KiteArgv(path, m)
	}, nil
}

// startSoakProc starts the named server (the reference etcd, or kite on
// SQLite) on a fresh temporary data dir and a free loopback port, and
// waits until it answers.
func startSoakProc(ctx context.Context, cfg *soakConfig, log *slog.Logger, name string, argv func(testenv.Member) []string) (*testenv.ToolServer, error) {
	c, err := testenv.StartCluster(ctx, log, testenv.ClusterSpec{
		Name: name, Argv: argv, WorkDir: cfg.WorkDir, DirPrefix: "kite-soak-", StartupWait: cfg.StartupWait,
	})
	if err != nil {
		return nil, err
	}
	return c.Servers[0], nil
}

// target is a server's connections, each its own gRPC channel.
type target struct {
	name  string
	conns []*clientv3.Client
}

// connect opens n connections to endpoint.
func connect(name, endpoint string, n int) (*target, error) {
	conns, err := testenv.Clients([]string{endpoint}, n)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", name, err)
	}
	return &target{name: name, conns: conns}, nil
}

func (t *target) close() {
	for _, c := range t.conns {
		c.Close()
	}
}
