package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/kite-db/kite/pkg/mvcc"
)

// Notification payloads are a wake-up, not data: "<origin> commit <rev>
// <changed>" says another server committed up to rev (and which of leases,
// alarms, the compacted revision and the auth state changed), and the
// receiver reads the rows from the log itself. rev is 0 only for a commit
// on an empty log that changed something else (a lease granted, a user
// added, before the first key). "<origin> renew <id>" says a lease was kept
// alive. They stay far below NOTIFY's 8000-byte limit.
const (
	kindCommit = "commit"
	kindRenew  = "renew"
)

func commitPayload(origin string, rev int64, changed mvcc.Changed) string {
	return origin + " " + kindCommit + " " + strconv.FormatInt(rev, 10) + " " + strconv.Itoa(int(changed))
}

func renewPayload(origin string, id int64) string {
	return origin + " " + kindRenew + " " + strconv.FormatInt(id, 10)
}

// parsePayload reads a payload back into its origin and notice.
func parsePayload(s string) (origin string, n mvcc.Notice, err error) {
	f := strings.Fields(s)
	switch {
	case len(f) == 4 && f[1] == kindCommit:
		rev, err1 := strconv.ParseInt(f[2], 10, 64)
		changed, err2 := strconv.ParseUint(f[3], 10, 8)
		if err1 != nil || err2 != nil || rev < 0 || rev == 0 && changed == 0 {
			break
		}
		return f[0], mvcc.Notice{Rev: rev, Changed: mvcc.Changed(changed)}, nil
	case len(f) == 3 && f[1] == kindRenew:
		id, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil || id == 0 {
			break
		}
		return f[0], mvcc.Notice{Renewed: id}, nil
	}
	return "", mvcc.Notice{}, fmt.Errorf("malformed notification payload %q", s)
}

// Reconnection pacing of the dedicated connections (listener, primary).
const (
	minBackoff  = 100 * time.Millisecond
	maxBackoff  = 5 * time.Second
	logInterval = 5 * time.Second
)

// noticeBuffer decouples the listener from a Store busy reading the log.
const noticeBuffer = 256

// listener holds a dedicated connection in LISTEN and turns the other
// servers' notifications into Notices. It is a connection of its own, not
// a pool connection: notifications reach only the session that listens,
// and only while that session reads them, so it must never be lent to a
// query or closed by the pool.
type listener struct {
	cfg    *pgx.ConnConfig
	origin string
	log    *slog.Logger
	ch     chan mvcc.Notice
	cancel context.CancelFunc
	done   chan struct{}
	// received counts the notifications of the other servers, reconnects
	// the times the LISTEN connection was lost and made again (ListenStats).
	received, reconnects atomic.Int64
}

// startListener connects and runs LISTEN before it returns, so no commit
// made after Open returns can be missed.
func startListener(ctx context.Context, cfg *pgx.ConnConfig, origin string, log *slog.Logger) (*listener, error) {
	conn, err := connectListen(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("listen for notifications: %w", err)
	}
	lctx, cancel := context.WithCancel(context.Background())
	l := &listener{cfg: cfg, origin: origin, log: log, ch: make(chan mvcc.Notice, noticeBuffer),
		cancel: cancel, done: make(chan struct{})}
	go l.run(lctx, conn)
	return l, nil
}

func connectListen(ctx context.Context, cfg *pgx.ConnConfig) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{notifyChannel}.Sanitize()); err != nil {
		closeConn(conn)
		return nil, fmt.Errorf("listen: %w", err)
	}
	return conn, nil
}

// closeConn closes a dedicated connection without waiting long for a
// server that may be gone.
func closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}

// run blocks in WaitForNotification: nothing polls while the connection
// is healthy. When it fails, notifications sent meanwhile are lost, so
// after reconnecting it sends Resync and the Store re-reads its state.
func (l *listener) run(ctx context.Context, conn *pgx.Conn) {
	defer close(l.done)
	defer close(l.ch)
	defer func() {
		if conn != nil {
			closeConn(conn)
		}
	}()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			closeConn(conn)
			if conn = l.reconnect(ctx, err); conn == nil {
				return
			}
			l.reconnects.Add(1)
			if !l.send(ctx, mvcc.Notice{Resync: true}) {
				return
			}
			continue
		}
		origin, notice, err := parsePayload(n.Payload)
		if err != nil {
			l.log.Warn("ignoring notification", "channel", n.Channel, "error", err)
			continue
		}
		if origin == l.origin {
			continue
		}
		l.received.Add(1)
		if !l.send(ctx, notice) {
			return
		}
	}
}

// reconnect retries with backoff until LISTEN runs again; nil when the
// listener is closed.
func (l *listener) reconnect(ctx context.Context, cause error) *pgx.Conn {
	r := retry{log: l.log, what: "notification connection"}
	for ctx.Err() == nil {
		r.failed(cause)
		if !r.wait(ctx) {
			return nil
		}
		conn, err := connectListen(ctx, l.cfg)
		if err == nil {
			r.recovered()
			return conn
		}
		cause = err
	}
	return nil
}

// send delivers n unless the listener is closed meanwhile: Close never
// waits for a Store that stopped reading.
func (l *listener) send(ctx context.Context, n mvcc.Notice) bool {
	select {
	case l.ch <- n:
		return true
	case <-ctx.Done():
		return false
	}
}

func (l *listener) close() {
	l.cancel()
	<-l.done
}

// retry paces the reconnection of a dedicated connection and keeps its log
// to one line every logInterval however fast it fails.
type retry struct {
	log     *slog.Logger
	what    string
	backoff time.Duration
	logged  time.Time
	fails   int
}

func (r *retry) failed(err error) {
	r.fails++
	if time.Since(r.logged) >= logInterval {
		r.log.Warn(r.what+" failed, reconnecting", "error", err, "attempts", r.fails)
		r.logged = time.Now()
	}
}

func (r *retry) recovered() {
	if r.fails > 0 {
		r.log.Info(r.what+" re-established", "attempts", r.fails)
	}
	r.fails, r.backoff, r.logged = 0, 0, time.Time{}
}

// wait sleeps the next backoff step; false if ctx ended first.
func (r *retry) wait(ctx context.Context) bool {
	r.backoff = min(max(2*r.backoff, minBackoff), maxBackoff)
	t := time.NewTimer(r.backoff)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
