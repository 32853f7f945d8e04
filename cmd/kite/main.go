// Command kite is an etcd v3 server whose data lives in SQL.
//
//	kite [flags]        serve (see kite --help)
//	kite snapshot ...   save a snapshot from a server, restore one into a data dir
//	kite copy ...       copy a cluster between storages (sqlite, postgres, an etcd endpoint)
//	kite datastore ...  accept-history: serve a Postgres or MySQL database that lost acknowledged revisions
//	kite version        print versions
package main

import (
	"fmt"
	"os"
)

// main dispatches to a subcommand (one file each, run with the arguments
// after its name, returning the exit code). Serving is the default when the
// first argument is not a subcommand, so `kite --data-dir x` works like etcd.
func main() {
	// Tests (kitetest builds only) may send name lookups to their own DNS
	// server: set before anything looks a name up.
	setTestResolver()
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
