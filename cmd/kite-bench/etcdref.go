package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"go.etcd.io/etcd/server/v3/embed"

	"github.com/kite-db/kite/internal/testenv"
)

// etcdServerCommand is the hidden subcommand that serves a reference etcd.
// --compare re-executes kite-bench with it, so the reference server is its
// own process: its memory can be read from /proc and its CPU does not mix
// with the load generator's garbage collector.
const etcdServerCommand = "etcd-server"

// runEtcdServer serves etcd from embed with its defaults (fsync on, the
// same durability kite promises) until SIGINT or SIGTERM. Alone it is a
// single-member cluster; with --initial-cluster (raftsql mode) it is one
// member of a cluster of such processes, with etcd's defaults for
// heartbeat (100 ms) and election timeout (1 s), as kite's members have.
func runEtcdServer(args []string) int {
	fs := flag.NewFlagSet(etcdServerCommand, flag.ContinueOnError)
	var m member
	fs.StringVar(&m.dataDir, "data-dir", "", "data directory (required)")
	fs.StringVar(&m.clientURL, "listen", "", "client URL, e.g. http://127.0.0.1:2379 (required)")
	fs.StringVar(&m.name, "name", "etcd-ref", "member name")
	fs.StringVar(&m.peerURL, "listen-peer", "", "peer URL, listened on and advertised (default: a free loopback port; required with --initial-cluster)")
	fs.StringVar(&m.initialCluster, "initial-cluster", "", "name=peerURL,... of every member (default: this member alone)")
	fs.StringVar(&m.token, "initial-cluster-token", "", "cluster token of a multi-member cluster")
	quota := fs.Int64("quota-backend-bytes", 0, "etcd's --quota-backend-bytes: the NOSPACE alarm's database size (0: etcd's default, 2 GiB; negative: no quota)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if m.dataDir == "" || m.clientURL == "" {
		fmt.Fprintln(os.Stderr, "kite-bench etcd-server: --data-dir and --listen are required")
		return 2
	}
	if m.initialCluster != "" && m.peerURL == "" {
		fmt.Fprintln(os.Stderr, "kite-bench etcd-server: --initial-cluster needs --listen-peer")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	e, err := startEmbedded(ctx, m, *quota)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kite-bench etcd-server: %v\n", err)
		return 1
	}
	defer e.Close()
	select {
	case <-ctx.Done():
		return 0
	case err := <-e.Err():
		fmt.Fprintf(os.Stderr, "kite-bench etcd-server: %v\n", err)
		return 1
	}
}

// startEmbedded starts an embedded etcd member serving clients on
// m.clientURL and waits until it is ready (testenv.StartEtcd).
// quotaBackendBytes is etcd's QuotaBackendBytes (0: its default). The
// caller closes it.
func startEmbedded(ctx context.Context, m member, quotaBackendBytes int64) (*embed.Etcd, error) {
	return testenv.StartEtcd(ctx, testenv.EtcdConfig{
		Name:              m.name,
		Dir:               m.dataDir,
		ClientURL:         m.clientURL,
		PeerURL:           m.peerURL,
		InitialCluster:    m.initialCluster,
		Token:             m.token,
		QuotaBackendBytes: quotaBackendBytes,
	})
}
