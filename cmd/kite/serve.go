package main

import (
	"context"
	"errors"
	"flag"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"go.etcd.io/etcd/api/v3/version"
	"go.etcd.io/etcd/server/v3/storage/wal"

	"github.com/kite-db/kite/pkg/datastore"
	"github.com/kite-db/kite/pkg/drivers/raftsql"
	"github.com/kite-db/kite/pkg/server"
)

// runServe is the default command: serve until SIGINT or SIGTERM, then shut
// down gracefully (in-flight requests finish, the database is closed).
func runServe(args []string) int {
	f, err := parseServeFlags(args, os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return fatalf("%v", err)
	}
	// A bad endpoint is refused before anything starts.
	kind, err := datastore.Kind(f.datastoreEndpoint)
	if err != nil {
		return fatalf("--datastore-endpoint: %v", err)
	}
	// The logger comes first: DNS discovery and the bootstrap checks may
	// wait for names to resolve, and say so.
	log, err := f.newLogger(os.Stderr)
	if err != nil {
		return fatalf("%v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if f.raft != nil {
		kind = datastore.KindRaftSQL
		f.raft.Logger = log.With("component", "raftsql")
		// As etcd, only a member that has not bootstrapped yet asks DNS
		// for its cluster: a restart reads its members from the WAL.
		if f.discoverySRV != "" && !wal.Exist(filepath.Join(f.dataDir, "member", "wal")) {
			if err := f.discover(ctx, net.DefaultResolver, f.raft.Logger); err != nil {
				return fatalf("error setting up initial cluster: %v", err)
			}
		}
		// etcd refuses a bad bootstrap before it writes anything, the data
		// dir included.
		if err := raftsql.CheckBootstrap(f.dataDir, *f.raft); err != nil {
			return fatalf("%v", err)
		}
	}
	f.memoryShares().applyGoLimit(log, os.Getenv)
	if len(f.idleRaft) > 0 {
		log.Warn("raft tuning flags have no effect outside raftsql mode (there is no raft log); accepted as a single etcd member accepts them",
			"flags", strings.Join(f.idleRaft, " "), "datastore", kind)
	}
	for _, name := range unknownEtcdEnv(os.Environ()) {
		log.Warn("etcd environment variable not understood by kite; ignored", "variable", name)
	}

	log.Info("starting kite", "version", kiteVersion(), "etcd-api-version", version.Version,
		"name", f.name, "data-dir", f.dataDir, "listen-client-urls", f.listenClientURLs.String(),
		"datastore", kind, "datastore-endpoint", datastore.Redact(f.datastoreEndpoint), "memory-budget", &f.memoryBudget)
	// A listener opened on a host name listens on its address: wait until
	// the names resolve (a pod's record comes some seconds after the pod).
	listen := slices.Clone(f.listenClientURLs)
	if f.raft != nil {
		listen = append(listen, f.raft.ListenPeer...)
	}
	if err := (raftsql.Resolver{Log: log}).WaitForURLs(ctx, listen); err != nil {
		log.Error("kite stopped with an error", "error", err)
		return 1
	}
	if err := server.Run(ctx, f.config(log)); err != nil {
		log.Error("kite stopped with an error", "error", err)
		return 1
	}
	log.Info("kite stopped")
	return 0
}
