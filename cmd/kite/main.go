// Command kite is an etcd v3 server whose data lives in SQL.
//
//	kite [flags]        serve (see kite --help)
//	kite snapshot ...   save a snapshot from a server, restore one into a data dir
//	kite copy ...       copy a cluster between storages (sqlite, postgres, an etcd endpoint)
//	kite datastore ...  accept-history: serve a Postgres database that lost acknowledged revisions
//	kite version        print versions
package main

import (
	"context"
	"fmt"
	"net"
	"os"
)

// main dispatches to a subcommand (one file each, run with the arguments
// after its name, returning the exit code). Serving is the default when the
// first argument is not a subcommand, so `kite --data-dir x` works like etcd.
func main() {
	// KITE_TEST_DNS_SERVER=127.0.0.1:PORT sends every name lookup of this
	// process (listening, dialing peers, --discovery-srv) to that DNS
	// server. It exists for tests, which serve a cluster's names and SRV
	// records themselves and change them while kite runs
	// (test/dnsserver_test.go), as KITE_TEST_PEER_FAULTS serves the peer
	// fault hooks (pkg/drivers/raftsql/faults.go); it is set once, here,
	// before anything looks a name up, and never in production.
	if addr := os.Getenv("KITE_TEST_DNS_SERVER"); addr != "" {
		net.DefaultResolver = &net.Resolver{PreferGo: true,
			Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, network, addr)
			}}
	}
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "version":
			os.Exit(runVersion(os.Args[2:]))
		case "snapshot":
			os.Exit(runSnapshot(os.Args[2:]))
		case "copy":
			os.Exit(runCopy(os.Args[2:]))
		case "datastore":
			os.Exit(runDatastore(os.Args[2:]))
		}
	}
	os.Exit(runServe(os.Args[1:]))
}

// fatalf prints an error the way every subcommand does and returns exit
// code 1.
func fatalf(format string, args ...any) int {
	fmt.Fprintf(os.Stderr, "kite: "+format+"\n", args...)
	return 1
}
