package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/kite-db/kite/internal/testenv"
)

// etcdServerCommand is the hidden subcommand that serves the reference
// etcd. The soak re-executes kite-soak with it, so the reference server
// is its own process: its memory can be read from /proc and its CPU does
// not mix with the load generator's garbage collector.
const etcdServerCommand = "etcd-server"

// runEtcdServer serves a single-member etcd with its defaults (fsync on,
// the same durability kite promises) until SIGINT or SIGTERM.
func runEtcdServer(args []string) int {
	fs := flag.NewFlagSet(etcdServerCommand, flag.ContinueOnError)
	var c testenv.EtcdConfig
	fs.StringVar(&c.Dir, "data-dir", "", "data directory (required)")
	fs.StringVar(&c.ClientURL, "listen", "", "client URL, e.g. http://127.0.0.1:2379 (required)")
	fs.StringVar(&c.Name, "name", "etcd-ref", "member name")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if c.Dir == "" || c.ClientURL == "" {
		fmt.Fprintln(os.Stderr, "kite-soak etcd-server: --data-dir and --listen are required")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	e, err := testenv.StartEtcd(ctx, c)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kite-soak etcd-server: %v\n", err)
		return 1
	}
	defer e.Close()
	select {
	case <-ctx.Done():
		return 0
	case err := <-e.Err():
		fmt.Fprintf(os.Stderr, "kite-soak etcd-server: %v\n", err)
		return 1
	}
}
