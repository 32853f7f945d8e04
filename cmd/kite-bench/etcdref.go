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
// same durability kite promises) until SIGINT or SIGTERM.
func runEtcdServer(args []string) int {
	fs := flag.NewFlagSet(etcdServerCommand, flag.ContinueOnError)
	dataDir := fs.String("data-dir", "", "data directory (required)")
	listen := fs.String("listen", "", "client URL, e.g. http://127.0.0.1:2379 (required)")
	name := fs.String("name", "etcd-ref", "member name")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *dataDir == "" || *listen == "" {
		fmt.Fprintln(os.Stderr, "kite-bench etcd-server: --data-dir and --listen are required")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	e, err := startEmbedded(ctx, *name, *dataDir, *listen)
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

// startEmbedded starts an embedded single-member etcd serving clients on
// listen and waits until it is ready. The caller closes it.
func startEmbedded(ctx context.Context, name, dataDir, listen string) (*embed.Etcd, error) {
	cu, err := url.Parse(listen)
	if err != nil {
		return nil, fmt.Errorf("parse --listen: %w", err)
	}
	peerPort, err := freePort()
	if err != nil {
		return nil, err
	}
	pu := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", fmt.Sprint(peerPort))}

	cfg := embed.NewConfig()
	cfg.Name = name
	cfg.Dir = dataDir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
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
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
