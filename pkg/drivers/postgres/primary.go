package postgres

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
)

// primaryInterval is how often a server that is not primary tries the lock,
// and how often the primary checks that its lock connection is alive.
const primaryInterval = time.Second

// primaryPingTimeout bounds the primary's check of its lock connection. A
// database that stops answering (a partition, a frozen server) leaves the
// ping waiting for TCP to give up, which takes many minutes; meanwhile the
// database drops the session after its keepalives fail (serverKeepalives:
// about 11 s) and lets another server take the lock. Stepping down first,
// within primaryInterval plus this timeout, keeps two servers from both
// running the once-only jobs: the one that lost the database must not
// wake up after a heal still believing it expires leases, with a clock
// that never heard of the renewals made through the new primary.
const primaryPingTimeout = 2 * time.Second

// primary competes for the session-level advisory lock that makes one kite
// server of the cluster the one that runs the once-only jobs (lease expiry,
// compaction). Session-level means the lock lives as long as the
// connection: a server that dies, or loses its connection, loses the lock
// with it and another takes over, with no lease or heartbeat table to
// expire. The lock connection is dedicated for the same reason as the
// listener's: a pooled connection could be closed or replaced under it.
type primary struct {
	cfg    *pgx.ConnConfig
	log    *slog.Logger
	ch     chan bool
	cancel context.CancelFunc
	done   chan struct{}
}

func startPrimary(cfg *pgx.ConnConfig, log *slog.Logger) *primary {
	ctx, cancel := context.WithCancel(context.Background())
	p := &primary{cfg: cfg, log: log, ch: make(chan bool, 1), cancel: cancel, done: make(chan struct{})}
	go p.run(ctx)
	return p
}

func (p *primary) run(ctx context.Context) {
	defer close(p.done)
	defer close(p.ch)
	var (
		conn *pgx.Conn
		held bool
		r    = retry{log: p.log, what: "primary lock connection"}
	)
	defer func() {
		if conn == nil {
			return
		}
		if held {
			// Closing the session releases the lock as well; unlocking first
			// frees it without waiting for the server to notice the close.
			uctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, _ = conn.Exec(uctx, `SELECT pg_advisory_unlock($1)`, primaryLockKey)
			cancel()
			p.log.Info("released primary lock")
		}
		closeConn(conn)
	}()
	drop := func(err error) {
		closeConn(conn)
		conn = nil
		r.failed(err)
	}
	tick := time.NewTicker(primaryInterval)
	defer tick.Stop()
	for {
		switch {
		case conn == nil:
			c, err := pgx.ConnectConfig(ctx, p.cfg)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				r.failed(err)
				if !r.wait(ctx) {
					return
				}
				continue
			}
			conn = c
			r.recovered()
			continue // try the lock at once
		case !held:
			var ok bool
			if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, primaryLockKey).Scan(&ok); err != nil {
				if ctx.Err() != nil {
					return
				}
				drop(err)
				if !r.wait(ctx) {
					return
				}
				continue
			}
			if ok {
				held = true
				p.log.Info("became primary")
				if !p.send(ctx, true) {
					return
				}
			}
		default:
			pctx, cancel := context.WithTimeout(ctx, primaryPingTimeout)
			err := conn.Ping(pctx)
			cancel()
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				// The session, and the lock with it, is gone or going: step
				// down before anything else.
				held = false
				p.log.Warn("lost primary lock", "error", err)
				drop(err)
				if !p.send(ctx, false) {
					return
				}
				continue
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
