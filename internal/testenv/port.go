// Package testenv is what kite's end-to-end tests (test/, test/k8s) and
// its load tools (cmd/kite-bench, cmd/kite-soak, test/kube/bench) share
// to run servers on this machine: free loopback ports, the kite and kine
// binaries, child processes that cannot outlive their parent, and the
// embedded reference etcd. For the load tools it is their one harness:
// etcd, kite and kine started as processes in every mode (argv.go,
// cluster.go, toolserver.go), the Postgres and MySQL databases they run
// on (database.go), the CPU and memory of each process (sample.go), and
// the tables their results and ratios are printed in (ratio.go); each
// tool keeps only its workload. Tests get fresh Postgres databases from
// internal/pgadmin through pkg/drivers/postgres/pgtest.
package testenv

import "github.com/kite-db/kite/internal/freeport"

// FreePort returns a loopback port that was free a moment ago
// (internal/freeport says how it is picked, and why not by bind(:0)).
func FreePort() (int, error) { return freeport.One() }

// FreePorts returns n distinct loopback ports that were free a moment ago.
func FreePorts(n int) ([]int, error) { return freeport.N(n) }
