package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/kite-db/kite/pkg/datastore"
	"github.com/kite-db/kite/pkg/drivers/mysql"
	"github.com/kite-db/kite/pkg/drivers/postgres"
)

// runAcceptHistory is `kite datastore accept-history`: after a failover to
// an asynchronous standby or replica (or, on Postgres, a point-in-time
// restore) kite refuses the shared database, since revisions it
// acknowledged may be missing from it. The operator who chooses to accept
// that loss, rather than restore the missing commits, records the
// database as it is now as kite's with this command (Postgres: its
// timeline; MySQL: the server serving it), then restarts every kite
// server: each one's memory, and its watchers', holds revisions the
// database no longer has.
func runAcceptHistory(args []string) int {
	fs := flag.NewFlagSet("kite datastore accept-history", flag.ContinueOnError)
	endpoint := fs.String("datastore-endpoint", "", "the postgres://... or mysql://... endpoint the kite servers use")
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
	if (kind != datastore.KindPostgres && kind != datastore.KindMySQL) || *endpoint == "" {
		return fatalf("datastore accept-history: --datastore-endpoint must be a postgres:// or mysql:// endpoint (only a shared database records where kite's writes went)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if kind == datastore.KindMySQL {
		return acceptMySQLHistory(ctx, *endpoint, log)
	}
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

// acceptMySQLHistory is accept-history on a mysql:// endpoint: the server
// serving the database now becomes the one kite's writes are recorded on.
func acceptMySQLHistory(ctx context.Context, endpoint string, log *slog.Logger) int {
	before, after, err := mysql.AcceptHistory(ctx, endpoint, log)
	if err != nil {
		return fatalf("datastore accept-history %s: %v", datastore.Redact(endpoint), err)
	}
	if before.Err() == nil {
		fmt.Printf("nothing to accept: revision %d on server_id %d (recorded: %s); recorded server_id %d now\n",
			before.Rev, before.Current, mysqlRecorded(before), after.Recorded.Int64)
		return 0
	}
	fmt.Printf("accepted: the database's history ends at revision %d on server_id %d (kite had recorded server_id %d).\n"+
		"Restart every kite server now: their memory holds revisions the database lost.\n",
		after.Rev, after.Current, before.Recorded.Int64)
	return 0
}

// mysqlRecorded says what a History recorded, for a message.
func mysqlRecorded(h mysql.History) string {
	switch {
	case !h.Recorded.Valid:
		return "none yet"
	case h.Synced:
		return fmt.Sprintf("server_id %d, a Galera node", h.Recorded.Int64)
	default:
		return fmt.Sprintf("server_id %d", h.Recorded.Int64)
	}
}
