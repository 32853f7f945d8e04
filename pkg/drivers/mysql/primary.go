package mysql

import (
	"context"
	"database/sql"
	"log/slog"
	"time"
)

// The primary is the one server of a database that runs the once-only
// jobs (lease expiry, compaction). It is chosen by a lease in the
// database, kite_primary: the holder renews its claim every second, by
// the database's clock, and another server takes the row only once the
// claim has run out. A named lock (GET_LOCK) would free itself when its
// holder's session dies, but it is local to one node of a Galera cluster,
// where two servers on two nodes would both hold it; a row is the same on
// every node, and two claims on two nodes conflict at certification.
//
// A holder that cannot renew steps down after primaryStepDown by its own
// clock, before its claim (primaryTerm, from the moment its last
// successful renewal began) runs out in the database: the servers must
// run their clocks at about the same rate, and on Galera the nodes' clocks
// must agree to well under primaryTerm - primaryStepDown (NTP does).
// After a holder dies the others take over within primaryTerm plus one
// renewal interval.
const (
	primaryInterval = time.Second
	primaryTerm     = 6 * time.Second
	primaryStepDown = 3 * time.Second
	primaryTimeout  = 2 * time.Second
)

const (
	// Placeholders: holder, term in microseconds, holder.
	sqlClaimPrimary = `UPDATE kite_primary SET holder = ?, expires = TIMESTAMPADD(MICROSECOND, ?, UTC_TIMESTAMP(6))
		WHERE id = 1 AND (holder = ? OR expires < UTC_TIMESTAMP(6))`
	sqlReleasePrimary = `UPDATE kite_primary SET holder = '', expires = '1970-01-01 00:00:00'
		WHERE id = 1 AND holder = ?`
)

type primary struct {
	db     *sql.DB // the background pool (Backend.bg)
	name   string
	log    *slog.Logger
	ch     chan bool
	cancel context.CancelFunc
	done   chan struct{}
}

func startPrimary(db *sql.DB, name string, log *slog.Logger) *primary {
	ctx, cancel := context.WithCancel(context.Background())
	p := &primary{db: db, name: name, log: log, ch: make(chan bool, 1), cancel: cancel, done: make(chan struct{})}
	go p.run(ctx)
	return p
}

// claim takes or renews the primary lease; false (and no error) when
// another server holds it.
func (p *primary) claim(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, primaryTimeout)
	defer cancel()
	res, err := p.db.ExecContext(ctx, sqlClaimPrimary, p.name, primaryTerm.Microseconds(), p.name)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

func (p *primary) run(ctx context.Context) {
	defer close(p.done)
	defer close(p.ch)
	var (
		held     bool
		renewed  time.Time // when the last successful claim began
		failures int
	)
	defer func() {
		if held {
			// Freed at once for the next server, instead of when the
			// claim runs out.
			rctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, _ = p.db.ExecContext(rctx, sqlReleasePrimary, p.name)
			cancel()
			p.log.Info("released primary lease")
		}
	}()
	tick := time.NewTicker(primaryInterval)
	defer tick.Stop()
	for {
		began := time.Now()
		ok, err := p.claim(ctx)
		if ctx.Err() != nil {
			return
		}
		switch {
		case err == nil && ok:
			renewed, failures = began, 0
			if !held {
				held = true
				p.log.Info("became primary")
				if !p.send(ctx, true) {
					return
				}
			}
		case err == nil:
			// Another server holds it; a holder finds this only if its
			// own claim ran out unrenewed, and steps down now.
			if held {
				held = false
				p.log.Warn("lost primary lease to another server")
				if !p.send(ctx, false) {
					return
				}
			}
		default:
			failures++
			if failures == 1 || failures%30 == 0 {
				p.log.Warn("primary lease: claim failed", "error", err, "attempts", failures)
			}
			if held && time.Since(renewed) >= primaryStepDown {
				held = false
				p.log.Warn("stepped down: the primary lease could not be renewed", "error", err)
				if !p.send(ctx, false) {
					return
				}
			}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
	}
}

// send reports a role change unless the Backend is closed meanwhile.
func (p *primary) send(ctx context.Context, v bool) bool {
	select {
	case p.ch <- v:
		return true
	case <-ctx.Done():
		return false
	}
}

func (p *primary) close() {
	p.cancel()
	<-p.done
}
