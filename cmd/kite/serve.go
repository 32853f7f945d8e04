package main

import (
	"context"
	"errors"
	"flag"
	"os"
	"os/signal"
	"syscall"

	"go.etcd.io/etcd/api/v3/version"

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
	if f.raft != nil {
		kind = datastore.KindRaftSQL
		// etcd refuses a bad bootstrap before it writes anything, the data
		// dir included.
		if err := raftsql.CheckBootstrap(f.dataDir, *f.raft); err != nil {
			return fatalf("%v", err)
		}
	}
	log, err := f.newLogger(os.Stderr)
	if err != nil {
		return fatalf("%v", err)
	}
	for _, name := range unknownEtcdEnv(os.Environ()) {
		log.Warn("etcd environment variable not understood by kite; ignored", "variable", name)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	log.Info("starting kite", "version", kiteVersion(), "etcd-api-version", version.Version,
		"name", f.name, "data-dir", f.dataDir, "listen-client-urls", f.listenClientURLs.String(),
		"datastore", kind, "datastore-endpoint", datastore.Redact(f.datastoreEndpoint))
	if err := server.Run(ctx, f.config(log)); err != nil {
		log.Error("kite stopped with an error", "error", err)
		return 1
	}
	log.Info("kite stopped")
	return 0
}
