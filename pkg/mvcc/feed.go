package mvcc

import (
	"context"
	"fmt"
	"log/slog"
)

// The ordered feed. A Store keeps in memory the current and compacted
// revisions, the watch hub, the alarms and the lease clocks; all of it moves
// only on the writer's goroutine, in revision order, from one feed of
// committed revisions. With one Store per storage (sqlite) the feed is the
// Store's own commits. With several (postgres, mvcc.Shared) it is also the
// commits of the others: a notice wakes the writer, which reads the log
// after the last revision it has published and publishes those revisions
// exactly as it publishes its own. A commit of this Store whose revision is
// not the next one first reads the revisions between (another Store's rows:
// the storage's revision lock ordered them before this commit).

// follow handles one notice of a shared storage, on the writer's goroutine.
func (s *Store) follow(n Notice) {
	if n.Renewed != 0 {
		s.lessor.renewedElsewhere(n.Renewed)
	}
	if n.Rev <= s.current.Load() && n.Changed == 0 && !n.Resync {
		return
	}
	what := n.Changed
	if n.Resync {
		what = ChangedLeases | ChangedAlarms | ChangedCompacted | ChangedAuth
	}
	if err := s.readLog(s.ctx, 0, what); err != nil {
		// The next notice, or the next local commit, reads the log again.
		s.log.Warn("follow the storage's commits", "rev", n.Rev, "err", err)
		return
	}
	if n.Resync && s.primary.Load() {
		// Renewals may have been lost with the notices.
		s.lessor.promote()
	}
}

// readLog publishes every committed revision after the last one this Store
// published, up to upTo (0: the newest committed), and re-reads the state
// named by what. It runs on the writer's goroutine only.
func (s *Store) readLog(ctx context.Context, upTo int64, what Changed) error {
	tx, current, compacted, err := s.beginRead(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if upTo == 0 || upTo > current {
		upTo = current
	}
	if compacted > s.compacted.Load() {
		s.compacted.Store(compacted)
		if s.primary.Load() {
			s.physical.notify(compacted)
		}
	}
	if err := s.publishFrom(ctx, tx, upTo, compacted); err != nil {
		return err
	}
	if what&ChangedLeases != 0 {
		leases, err := tx.Leases(ctx)
		if err != nil {
			return fmt.Errorf("read leases: %w", err)
		}
		s.lessor.reconcile(leases)
	}
	if what&ChangedAlarms != 0 {
		alarms, err := tx.Alarms(ctx)
		if err != nil {
			return fmt.Errorf("read alarms: %w", err)
		}
		s.quota.setAlarms(alarms)
	}
	if what&ChangedAuth != 0 {
		if err := s.auth.reload(ctx, s.b); err != nil {
			return err
		}
	}
	return nil
}

// publishFrom reads the revisions after the current one up to upTo from tx
// and publishes them in order, whole. Revisions at or below compacted may
// have lost rows to physical compaction: they are skipped, and watchers that
// needed them learn from the log that they are compacted, as in etcd.
func (s *Store) publishFrom(ctx context.Context, tx ReadTx, upTo, compacted int64) error {
	from := s.current.Load() + 1
	if from <= compacted && compacted <= upTo {
		s.log.Warn("revisions compacted before this server saw them; watchers that need them are cancelled",
			slog.Int64("from", from), slog.Int64("compacted", compacted))
		s.hub.skipTo(compacted)
		s.current.Store(compacted)
		from = compacted + 1
	}
	err := eachChunk(ctx, tx, from, upTo, true, func(rows []Change) error {
		for len(rows) > 0 {
			rev := rows[0].KV.ModRevision
			n := 1
			for n < len(rows) && rows[n].KV.ModRevision == rev {
				n++
			}
			s.publish(rev, rows[:n:n])
			rows = rows[n:]
		}
		return nil
	})
	if err != nil {
		return err
	}
	// Every revision is a write that changed at least one key, so none is
	// left without rows; upTo is this Store's current revision now.
	s.current.Store(max(s.current.Load(), upTo))
	return nil
}
