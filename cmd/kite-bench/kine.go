package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/kite-db/kite/internal/testenv"
)

// kine is the second reference of postgres and mysql modes: k3s's etcd shim
// (github.com/k3s-io/kine), the usual way to run Kubernetes on a SQL
// database. It implements the part of the etcd API kube-apiserver uses
// (no general Txn, no serializable reads, no leases beyond TTLs); its
// servers on one database learn of each other's writes by polling the
// table (--datastore-poll-interval, 1 s by default).
//
// How it is built: testenv.BuildKine (internal/testenv/kine.go), with the
// go command from kine's own module, never as a dependency of kite's.
const (
	kineVersion = testenv.KineVersion
	// kineAuto as --kine-binary builds kine (or reuses the cached build).
	kineAuto = "auto"
	// buildKineCommand is the subcommand that only builds kine.
	buildKineCommand = "build-kine"
)

// kineKind runs kine on the database whose URL is put in KINE_ENDPOINT
// (kine reads its --endpoint from there; the URL never shows in a process
// listing), serving etcd clients on the loopback URL it is given
// (testenv.KineArgv).
func kineKind(path string, servers int) serverKind {
	return serverKind{
		name:    "kine",
		servers: servers,
		dbEnv:   "KINE_ENDPOINT",
		partial: true,
		argv:    func(m testenv.Member) []string { return testenv.KineArgv(path, m.ClientURL, "") },
	}
}

// resolveKine returns the kine binary --kine-binary names, building it for
// kineAuto.
func resolveKine(ctx context.Context, cfg *config, log *slog.Logger) (string, error) {
	binary := cfg.kineBinary
	if binary == kineAuto {
		binary = ""
	}
	return testenv.FindKine(ctx, log, binary, cfg.kineCacheDir)
}

// runBuildKine is `kite-bench build-kine [--dir D]`: build kine (or find
// the cached build) and print the binary's path.
func runBuildKine(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(buildKineCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "directory of the build (default: $XDG_CACHE_HOME/kite-bench/kine-"+kineVersion+")")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *dir == "" {
		d, err := testenv.DefaultKineDir()
		if err != nil {
			fmt.Fprintf(stderr, "kite-bench %s: %v\n", buildKineCommand, err)
			return 1
		}
		*dir = d
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	p, err := testenv.BuildKine(context.Background(), log, *dir)
	if err != nil {
		fmt.Fprintf(stderr, "kite-bench %s: %v\n", buildKineCommand, err)
		return 1
	}
	fmt.Fprintln(stdout, p)
	return 0
}
