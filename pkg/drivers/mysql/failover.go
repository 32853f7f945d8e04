package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/kite-db/kite/pkg/mvcc"
)

// After a failover to an asynchronous replica, the database kite talks to
// may end before revisions kite already acknowledged and sent to
// watchers; serving it would number new writes with those revisions
// again, with other data. Postgres marks such a database with a new
// timeline; MySQL and MariaDB mark nothing, but a replica is always
// another server than its primary, with another server_id (replication
// refuses to run between two servers of one server_id). So every write
// batch records, in the UPDATE that moves the revisions (no round trip of
// its own), the server_id of the server it was written to and whether
// that server was a Galera node, whose commits every node of the primary
// component has certified before COMMIT returns. Every read and every
// write reads that record along with the revisions (no round trip of its
// own either) and compares: another server after writes that were not
// Galera's may have lost acknowledged revisions, and the Backend refuses
// everything with mvcc.ErrHistoryLost from then on, until the operator
// accepts the loss (AcceptHistory) and restarts every kite server.
//
// What this does not see: a backup restored onto the same server, or onto
// a new server given the old one's server_id (both default to 1). The
// Store still refuses on every running server whose published revision is
// above the database's (pkg/mvcc/history.go); a server started afterwards
// has no memory to compare.

// sqlRevisionRecord is what the revision row recorded of the last write
// and the server_id of now, read after current_rev and compacted_rev.
const sqlRevisionRecord = `writer, synced, @@server_id`

// sqlAcceptHistory records the server of now as kite's.
const sqlAcceptHistory = `UPDATE kite_revision SET writer = @@server_id, synced = ? WHERE id = 1`

// History is what the revision row recorded of kite's last write, and
// the server kite talks to now.
type History struct {
	// Rev is the current revision stored.
	Rev int64
	// Recorded is the server_id the last write went to; Valid is false
	// before a write recorded one (a database of schema version 2).
	Recorded sql.NullInt64
	// Synced: that server was a Galera node.
	Synced bool
	// Current is the server_id of the server now.
	Current int64
}

// scanTargets are the destinations of sqlRevisionRecord's columns.
func (h *History) scanTargets() []any { return []any{&h.Recorded, &h.Synced, &h.Current} }

// Err returns ErrHistoryLost, wrapped with what was found, when the
// database is served by another server than the one kite's last
// asynchronously replicated write went to.
func (h History) Err() error {
	if !h.Recorded.Valid || h.Recorded.Int64 == h.Current || h.Synced {
		return nil
	}
	return fmt.Errorf("%w: the database is served by the MySQL server with server_id %d, but kite's last write "+
		"(revision %d) went to server_id %d, replicated asynchronously, so revisions acknowledged before the failover "+
		"may be missing: restore the missing commits, or accept the loss with `kite datastore accept-history` "+
		"and restart every kite server", mvcc.ErrHistoryLost, h.Current, h.Rev, h.Recorded.Int64)
}

// historyLost returns the error this Backend refuses everything with,
// nil while the history is whole.
func (b *Backend) historyLost() error {
	if p := b.lost.Load(); p != nil {
		return *p
	}
	return nil
}

// checkHistory refuses h if it says revisions may be lost, and from then
// on everything: the pool's connections, old and new, serve one database.
func (b *Backend) checkHistory(h History) error {
	err := h.Err()
	if err == nil {
		return nil
	}
	if b.lost.CompareAndSwap(nil, &err) {
		b.log.Error("refusing the database: its history is behind what kite served", "err", err)
	}
	return *b.lost.Load()
}

// AcceptHistory records the server of now as the one kite writes to, so
// that kite servers serve the database again after its history was found
// behind what they served: the operator accepts that revisions
// acknowledged after the returned History's Rev are lost. Every kite
// server must be restarted afterwards, since each one's memory (and each
// watcher's) holds revisions the database no longer has. It returns what
// was recorded before and what is recorded now.
func AcceptHistory(ctx context.Context, dsn string, log *slog.Logger) (before, after History, err error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// A pool of its own rather than Open: accepting must not join the
	// kite servers of the database (wake-ups, the primary lease), which
	// are to be restarted anyway.
	cfg, err := ParseDSN(dsn)
	if err != nil {
		return History{}, History{}, err
	}
	connector, err := gomysql.NewConnector(cfg)
	if err != nil {
		return History{}, History{}, fmt.Errorf("accept history: %w", err)
	}
	b := &Backend{db: sql.OpenDB(connector), log: log}
	defer b.db.Close()
	galera, err := b.isGalera(ctx)
	if err != nil {
		return History{}, History{}, classify(fmt.Errorf("accept history: %w", err))
	}
	read := func() (History, error) {
		var h History
		var compacted int64
		err := b.db.QueryRowContext(ctx, sqlRevisions).Scan(append([]any{&h.Rev, &compacted}, h.scanTargets()...)...)
		if err != nil {
			return History{}, classify(fmt.Errorf("read the revision row: %w", err))
		}
		return h, nil
	}
	if before, err = read(); err != nil {
		return History{}, History{}, err
	}
	if _, err := b.db.ExecContext(ctx, sqlAcceptHistory, galera); err != nil {
		return before, History{}, classify(fmt.Errorf("record the server: %w", err))
	}
	if after, err = read(); err != nil {
		return before, History{}, err
	}
	if before.Err() != nil {
		log.Warn("accepted a history behind what kite served", "rev", after.Rev,
			"server_id", after.Current, "recorded_server_id", before.Recorded.Int64)
	}
	return before, after, nil
}
