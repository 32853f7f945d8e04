package testenv

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// EtcdServerCommand is the hidden subcommand of the load tools that
// serves a reference etcd (RunEtcdServer). A tool re-executes itself with
// it, so the reference server is its own process: its memory can be read
// from /proc and its CPU does not mix with the load generator's garbage
// collector.
const EtcdServerCommand = "etcd-server"

// RunEtcdServer is the EtcdServerCommand subcommand of tool (the name its
// messages start with): it serves an embedded etcd with etcd's defaults
// (StartEtcd) until SIGINT or SIGTERM, and returns the exit code. Alone
// it is a single-member cluster; with --initial-cluster it is one member
// of a cluster of such processes.
func RunEtcdServer(tool string, args []string) int {
	fs := flag.NewFlagSet(EtcdServerCommand, flag.ContinueOnError)
	var c EtcdConfig
	fs.StringVar(&c.Dir, "data-dir", "", "data directory (required)")
	fs.StringVar(&c.ClientURL, "listen", "", "client URL, e.g. http://127.0.0.1:2379 (required)")
	fs.StringVar(&c.Name, "name", "etcd-ref", "member name")
	fs.StringVar(&c.PeerURL, "listen-peer", "", "peer URL, listened on and advertised (default: a free loopback port; required with --initial-cluster)")
	fs.StringVar(&c.InitialCluster, "initial-cluster", "", "name=peerURL,... of every member (default: this member alone)")
	fs.StringVar(&c.Token, "initial-cluster-token", "", "cluster token of a multi-member cluster")
	fs.Int64Var(&c.QuotaBackendBytes, "quota-backend-bytes", 0, "etcd's --quota-backend-bytes: the NOSPACE alarm's database size (0: etcd's default, 2 GiB; negative: no quota)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	prefix := tool + " " + EtcdServerCommand + ":"
	if c.Dir == "" || c.ClientURL == "" {
		fmt.Fprintln(os.Stderr, prefix, "--data-dir and --listen are required")
		return 2
	}
	if c.InitialCluster != "" && c.PeerURL == "" {
		fmt.Fprintln(os.Stderr, prefix, "--initial-cluster needs --listen-peer")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	e, err := StartEtcd(ctx, c)
	if err != nil {
		fmt.Fprintln(os.Stderr, prefix, err)
		return 1
	}
	defer e.Close()
	select {
	case <-ctx.Done():
		return 0
	case err := <-e.Err():
		fmt.Fprintln(os.Stderr, prefix, err)
		return 1
	}
}
