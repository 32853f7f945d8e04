package postgres

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kite-db/kite/pkg/mvcc"
)

// A promoted standby or a point-in-time restore starts a new Postgres
// timeline. Every write batch records, in the revision row and in the
// UPDATE that moves the revisions, the timeline it was written to and
// whether its primary acknowledged only commits a synchronous standby had
// (see doc.go, "History"). A connection that finds the database on
// another timeline than the recorded one, after asynchronous writes, may
// be talking to a database that lost acknowledged revisions, and refuses.

// sqlTimeline is the timeline WAL is being written to now: the first eight
// hex digits of the current insert position's WAL file name. Exact on a
// primary the moment it is promoted, unlike the last checkpoint's
// timeline, and it costs no I/O.
const sqlTimeline = `('x' || left(pg_walfile_name(pg_current_wal_insert_lsn()), 8))::bit(32)::int8`

// sqlSynced says whether a commit of this session returns only once a
// synchronous standby has it. synchronous_commit is the session's own
// (set in the DSN or by the role), synchronous_standby_names the server's.
const sqlSynced = `(current_setting('synchronous_standby_names') <> '' AND
	current_setting('synchronous_commit') IN ('on', 'remote_write', 'remote_apply'))`

// sqlCheckHistory reads what kite_revision recorded with the database's
// timeline now.
const sqlCheckHistory = `SELECT current_rev, timeline, synced, ` + sqlTimeline + ` FROM kite_revision`

// sqlAcceptHistory records the timeline of now as kite's: the operator
// accepted that revisions after current_rev are gone.
const sqlAcceptHistory = `UPDATE kite_revision SET timeline = ` + sqlTimeline + `, synced = ` + sqlSynced +
	` RETURNING current_rev, timeline, synced`

// History is what the revision row recorded of kite's last write, and
// the database's timeline now.
type History struct {
	// Rev is the current revision stored.
	Rev int64
	// Recorded is the timeline the last write went to (0: none recorded
	// yet, a database written before kite recorded timelines).
	Recorded int64
	// Synced: that write's primary acknowledged only commits a synchronous
	// standby had.
	Synced bool
	// Current is the database's timeline now.
	Current int64
}

// Err returns ErrHistoryLost, wrapped with what was found, when the
// database moved to another timeline after asynchronous writes.
func (h History) Err() error {
	if h.Recorded == 0 || h.Recorded == h.Current || h.Synced {
		return nil
	}
	return fmt.Errorf("%w: the database is on Postgres timeline %d, but kite's last write (revision %d) went to "+
		"timeline %d with asynchronous replication, so revisions acknowledged before the failover or restore "+
		"may be missing: restore the database, or accept the loss with `kite datastore accept-history` "+
		"and restart every kite server", mvcc.ErrHistoryLost, h.Current, h.Rev, h.Recorded)
}

// readHistory reads the revision row's record and the timeline of now.
func readHistory(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (History, error) {
	var h History
	if err := q.QueryRow(ctx, sqlCheckHistory).Scan(&h.Rev, &h.Recorded, &h.Synced, &h.Current); err != nil {
		return History{}, unavailable(fmt.Errorf("read recorded timeline: %w", err))
	}
	return h, nil
}

// historyLost returns the error this Backend refuses everything with,
// nil while the history is whole.
func (b *Backend) historyLost() error {
	if p := b.lost.Load(); p != nil {
		return *p
	}
	return nil
}

// refuse makes err final for this Backend, logging it once: the pool's
// connections, old and new, serve the same database.
func (b *Backend) refuse(err error) error {
	if b.lost.CompareAndSwap(nil, &err) {
		b.log.Error("refusing the database: its history is behind what kite served", "err", err)
	}
	return err
}

// checkConn is the pool's AfterConnect: every new connection, a
// reconnection after a failover first among them, checks the timeline
// before it serves anything. Connections made while Open migrates the
// schema skip it (the columns may not exist yet); Open checks afterwards.
func (b *Backend) checkConn(ctx context.Context, conn *pgx.Conn) error {
	if err := b.historyLost(); err != nil {
		return err
	}
	if !b.migrated.Load() {
		return nil
	}
	return b.checkHistory(ctx, conn)
}

func (b *Backend) checkHistory(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) error {
	h, err := readHistory(ctx, q)
	if err != nil {
		return err
	}
	return b.checkRecorded(h)
}

// checkRecorded refuses a History that says revisions may be lost.
func (b *Backend) checkRecorded(h History) error {
	if err := h.Err(); err != nil {
		return b.refuse(err)
	}
	return nil
}

// AcceptHistory records the database's current timeline as the one kite
// writes to, so that kite servers serve it again after its history was
// found behind what they served: the operator accepts that revisions
// acknowledged after the returned History's Rev are lost. Every kite
// server must be restarted afterwards, since each one's memory (and each
// watcher's) holds revisions the database no longer has. It returns what
// was recorded before and what is recorded now.
func AcceptHistory(ctx context.Context, dsn string, log *slog.Logger) (before, after History, err error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return History{}, History{}, fmt.Errorf("accept history: parse connection string: %w", err)
	}
	cfg.MaxConns, cfg.MinConns = 1, 0
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return History{}, History{}, fmt.Errorf("accept history: connect: %w", err)
	}
	defer pool.Close()
	if err := migrate(ctx, pool, log); err != nil {
		return History{}, History{}, fmt.Errorf("accept history: %w", err)
	}
	err = pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		// The lock orders the change with any kite server still writing.
		if _, err := tx.Exec(ctx, sqlLockRevisions); err != nil {
			return fmt.Errorf("lock revisions: %w", err)
		}
		var err error
		if before, err = readHistory(ctx, tx); err != nil {
			return err
		}
		after.Current = before.Current
		return tx.QueryRow(ctx, sqlAcceptHistory).Scan(&after.Rev, &after.Recorded, &after.Synced)
	})
	if err != nil {
		return History{}, History{}, fmt.Errorf("accept history: %w", err)
	}
	if before.Err() == nil {
		return before, after, nil
	}
	log.Warn("accepted the database's history: revisions kite acknowledged after this revision may be lost; restart every kite server",
		"rev", after.Rev, "recorded_timeline", before.Recorded, "timeline", after.Recorded)
	return before, after, nil
}
