package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/kite-db/kite/pkg/datastore"
	"github.com/kite-db/kite/pkg/drivers/postgres"
)

// runAcceptHistory is `kite datastore accept-history`: after a failover to
// an asynchronous standby (or a point-in-time restore) kite refuses the
// Postgres database, since revisions it acknowledged may be missing from
// it. The operator who chooses to accept that loss, rather than restore
// the missing commits, records the database's current timeline as kite's
// with this command, then restarts every kite server: each one's memory,
// and its watchers', holds revisions the database no longer has.
func runAcceptHistory(args []string) int {
	fs := flag.NewFlagSet("kite datastore accept-history", flag.ContinueOnError)
	endpoint := fs.String("datastore-endpoint", "", "the postgres://... endpoint the kite servers use")
	timeout := fs.Duration("timeout", 30*time.Second, "how long to try")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 0 {
		return fatalf("datastore accept-history: unexpected arguments %q", fs.Args())
	}
	kind, err := datastore.Kind(*endpoint)
	if err != nil {
		return fatalf("datastore accept-history: %v", err)
	}
	if kind != datastore.KindPostgres || *endpoint == "" {
		return fatalf("datastore accept-history: --datastore-endpoint must be a postgres:// endpoint (only a shared Postgres database records timelines)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	before, after, err := postgres.AcceptHistory(ctx, *endpoint, log)
	if err != nil {
		return fatalf("datastore accept-history %s: %v", datastore.Redact(*endpoint), err)
	}
	if before.Err() == nil {
		fmt.Printf("nothing to accept: revision %d, timeline %d (recorded %d, synchronous %t); recorded timeline %d now\n",
			before.Rev, before.Current, before.Recorded, before.Synced, after.Recorded)
		return 0
	}
	fmt.Printf("accepted: the database's history ends at revision %d on timeline %d (kite had recorded timeline %d).\n"+
		"Restart every kite server now: their memory holds revisions the database lost.\n",
		after.Rev, after.Recorded, before.Recorded)
	return 0
}
