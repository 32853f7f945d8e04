package main

// runDatastore dispatches `kite datastore <command>`: operations on a
// shared storage that no running server does by itself, one file each.
func runDatastore(args []string) int {
	if len(args) == 0 {
		return fatalf("datastore: want a command: accept-history --datastore-endpoint postgres://... or mysql://...")
	}
	switch args[0] {
	case "accept-history":
		return runAcceptHistory(args[1:])
	}
	return fatalf("datastore: unknown command %q (want accept-history)", args[0])
}
