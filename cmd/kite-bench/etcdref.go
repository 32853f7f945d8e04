package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
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
// m.clientURL and waits until it is ready. Without m.initialCluster it is
// a single-member cluster (on m.peerURL, else a free peer port); for a
// member of a larger
// cluster, until the cluster has a quorum, so every member must be
// starting meanwhile. quotaBackendBytes is etcd's QuotaBackendBytes (0:
// its default). The caller closes it.
func startEmbedded(ctx context.Context, m member, quotaBackendBytes int64) (*embed.Etcd, error) {
	cu, err := url.Parse(m.clientURL)
	if err != nil {
		return nil, fmt.Errorf("parse --listen: %w", err)
	}
	peer := m.peerURL
	if peer == "" {
		peerPort, err := freePort()
		if err != nil {
			return nil, err
		}
		peer = "http://" + net.JoinHostPort("127.0.0.1", fmt.Sprint(peerPort))
	}
	pu, err := url.Parse(peer)
	if err != nil {
		return nil, fmt.Errorf("parse --listen-peer: %w", err)
	}

	cfg := embed.NewConfig()
	cfg.Name = m.name
	cfg.Dir = m.dataDir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	if m.initialCluster != "" {
		cfg.InitialCluster = m.initialCluster
	}
	if m.token != "" {
		cfg.InitialClusterToken = m.token
	}
	cfg.QuotaBackendBytes = quotaBackendBytes
	// etcd's default info logging would cost the reference CPU that kite
	// (started with --log-level warn) does not pay.
	cfg.LogLevel = "error"
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("start embedded etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, nil
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded etcd failed while starting: %w", err)
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, errors.New("embedded etcd not ready after 60s")
	case <-ctx.Done():
		e.Close()
		return nil, fmt.Errorf("start embedded etcd: %w", ctx.Err())
	}
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	ports, err := freePorts(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// freePorts returns n distinct loopback ports that were free a moment ago.
// All n are held open until the last is found, so two of them cannot be
// the same port released and handed out again (a raft cluster needs a
// client and a peer port per member).
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
