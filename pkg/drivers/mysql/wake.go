package mysql

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kite-db/kite/pkg/mvcc"
)

// How the kite servers on one database learn of each other's commits.
//
// MySQL has no LISTEN/NOTIFY and a binlog follower needs replication
// privileges, a binlog in ROW format, and a decoder of its events; so the
// servers wake each other directly. Each registers in kite_server the
// address where it takes wake-ups, and holds one TCP connection with every
// other live server. After each commit a server writes one line to each
// connection, "c <rev> <changed>"; the receiver reads the log after the
// last revision it has published, as a Postgres server does after a
// NOTIFY. The line is a wake-up, never the data: a lost one costs a
// delay, not an event.
//
// What keeps a lost wake-up from being lost for good:
//   - Every connection carries a heartbeat each second with the newest
//     revision its sender knows of; a connection silent for 3 s is closed.
//   - A connection made after a server started (a reconnect) is followed
//     by a Resync: the Store re-reads everything it keeps in memory.
//   - While a live server (one whose kite_server row is fresh) has no
//     connection, this server reads the current revision once a second
//     (the fallback; kite_db_wake_polls_total counts the polls) and keeps
//     redialling. Nothing polls while every connection is up.
//   - A server writes its row every 5 s; a row 15 s old is a dead
//     server's, and not waited for.
//
// Only a server that shows the database's token (kite_cluster) in its
// hello may send wake-ups: a forged keep-alive would otherwise hold a
// lease's clock back on the server that expires it.
const (
	wakeHello        = "KITE-WAKE/1"
	wakeHeartbeat    = time.Second
	wakeSilence      = 3 * wakeHeartbeat
	wakeWriteTimeout = 3 * time.Second
	wakeDialTimeout  = 2 * time.Second
	aliveEvery       = 5 * time.Second
	aliveFor         = 15 * time.Second
	forgetAfter      = time.Hour
	pollEvery        = time.Second
	wakeQueue        = 1024
)

const (
	sqlToken       = `SELECT token FROM kite_cluster WHERE id = 1`
	sqlInsertToken = `INSERT IGNORE INTO kite_cluster (id, token) VALUES (1, ?)`
	sqlAlive       = `INSERT INTO kite_server (name, addr, seen) VALUES (?, ?, UTC_TIMESTAMP(6))
		ON DUPLICATE KEY UPDATE addr = VALUES(addr), seen = VALUES(seen)`
	sqlServers = `SELECT name, addr FROM kite_server
		WHERE seen >= TIMESTAMPADD(MICROSECOND, ?, UTC_TIMESTAMP(6)) AND name <> ?`
	sqlForgetServers = `DELETE FROM kite_server WHERE seen < TIMESTAMPADD(MICROSECOND, ?, UTC_TIMESTAMP(6))`
	sqlLeave         = `DELETE FROM kite_server WHERE name = ?`
)

// allChanged is what a poll re-reads: it sees a new revision, not what
// the commit changed.
const allChanged = mvcc.ChangedLeases | mvcc.ChangedAlarms | mvcc.ChangedCompacted | mvcc.ChangedAuth

// wake is this server's side of the wake-ups.
type wake struct {
	db    *sql.DB // the background pool (Backend.bg)
	log   *slog.Logger
	name  string
	addr  string
	token string
	ln    net.Listener
	ch    chan mvcc.Notice
	kick  chan struct{}

	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once

	mu      sync.Mutex
	conns   map[*peerConn]struct{}
	byPeer  map[string]int    // open connections per server name
	known   map[string]string // live servers by kite_server, name → address
	gone    map[string]bool   // names whose address now answers as another server
	started bool              // Open has returned: a new connection needs a Resync

	// head is the newest revision this server committed or was told of.
	head                        atomic.Int64
	received, reconnects, polls atomic.Int64
	degraded                    atomic.Bool
}

// serverName names this process in kite_server and in the logs of the
// others: readable, and unique across restarts.
func serverName() string {
	host, _ := os.Hostname()
	if len(host) > 40 {
		host = host[:40]
	}
	var r [4]byte
	_, _ = rand.Read(r[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(r[:]))
}

// startWake listens on listen, registers the server, and connects to
// every live server before it returns, so that a commit made anywhere
// after Open returns wakes this one.
func startWake(ctx context.Context, db *sql.DB, name, listen, advertise string, log *slog.Logger) (w *wake, err error) {
	token, err := clusterToken(ctx, db)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("wake-ups: listen on %s: %w", listen, err)
	}
	addr := advertise
	if addr == "" {
		addr = advertised(ln.Addr().(*net.TCPAddr))
	}
	wctx, cancel := context.WithCancel(context.Background())
	w = &wake{db: db, log: log, name: name, addr: addr, token: token, ln: ln,
		ch: make(chan mvcc.Notice, 256), kick: make(chan struct{}, 1),
		ctx: wctx, cancel: cancel, conns: map[*peerConn]struct{}{}, byPeer: map[string]int{},
		known: map[string]string{}, gone: map[string]bool{}}
	defer func() {
		if err != nil {
			w.close()
		}
	}()
	w.wg.Add(1)
	go w.accept()
	// Registered before the others are read: of two servers starting at
	// once, at least one finds the other, and dials it.
	if _, err := db.ExecContext(ctx, sqlAlive, w.name, w.addr); err != nil {
		return nil, fmt.Errorf("wake-ups: register: %w", err)
	}
	if err := w.refresh(ctx); err != nil {
		return nil, err
	}
	w.dialMissing(ctx)
	w.mu.Lock()
	w.started = true
	peers := len(w.known) // read before maintain may replace it
	w.mu.Unlock()
	w.wg.Add(1)
	go w.maintain()
	log.Info("wake-ups", "server", w.name, "address", w.addr, "peers", peers)
	return w, nil
}

// advertised is the address the others dial: the listener's, with a
// wildcard host replaced by this machine's name.
func advertised(a *net.TCPAddr) string {
	if a.IP.IsUnspecified() {
		if host, err := os.Hostname(); err == nil {
			return net.JoinHostPort(host, strconv.Itoa(a.Port))
		}
	}
	return a.String()
}

// clusterToken reads the database's wake-up token, creating it on the
// first start.
func clusterToken(ctx context.Context, db *sql.DB) (string, error) {
	var r [16]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", fmt.Errorf("wake-ups: token: %w", err)
	}
	if _, err := db.ExecContext(ctx, sqlInsertToken, hex.EncodeToString(r[:])); err != nil {
		return "", fmt.Errorf("wake-ups: create token: %w", err)
	}
	var token string
	if err := db.QueryRowContext(ctx, sqlToken).Scan(&token); err != nil {
		return "", fmt.Errorf("wake-ups: read token: %w", err)
	}
	return token, nil
}

// committed wakes the others after this server's commit at rev.
func (w *wake) committed(rev int64, changed mvcc.Changed) {
	w.advance(rev)
	w.broadcast("c " + strconv.FormatInt(rev, 10) + " " + strconv.Itoa(int(changed)))
}

// renewed tells the others that lease id was kept alive here.
func (w *wake) renewed(id int64) {
	w.broadcast("r " + strconv.FormatInt(id, 10))
}

// advance raises head to rev; false if it was there already.
func (w *wake) advance(rev int64) bool {
	for {
		h := w.head.Load()
		if rev <= h {
			return false
		}
		if w.head.CompareAndSwap(h, rev) {
			return true
		}
	}
}

// broadcast queues a line on every connection. It never blocks a commit:
// a connection whose queue is full is closed, and its peer resyncs when
// it reconnects.
func (w *wake) broadcast(line string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for pc := range w.conns {
		select {
		case pc.out <- line:
		default:
			w.log.Warn("wake-up connection not keeping up, closing it", "peer", pc.peer)
			pc.shut()
		}
	}
}

// notify hands n to the Store unless the wake-ups are closed meanwhile.
func (w *wake) notify(n mvcc.Notice) bool {
	select {
	case w.ch <- n:
		return true
	case <-w.ctx.Done():
		return false
	}
}

func (w *wake) accept() {
	defer w.wg.Done()
	for {
		c, err := w.ln.Accept()
		if err != nil {
			if w.ctx.Err() == nil {
				w.log.Warn("wake-ups: accept", "error", err)
			}
			return
		}
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			// The connection is registered before this side's hello goes
			// out: once the dialler has read it, every commit made here
			// is queued for it, so a commit after the dialler's Open
			// returns always wakes it.
			_ = c.SetDeadline(time.Now().Add(wakeDialTimeout))
			br := bufio.NewReader(c)
			peer, fresh, err := w.readHello(br)
			if err != nil {
				w.log.Warn("wake-ups: refused a connection", "from", c.RemoteAddr(), "error", err)
				_ = c.Close()
				return
			}
			pc := w.register(c, br, peer)
			if pc == nil {
				return
			}
			if err := w.sendHello(c); err != nil {
				w.log.Warn("wake-ups: answer a connection", "from", c.RemoteAddr(), "error", err)
				w.drop(pc)
				return
			}
			_ = c.SetDeadline(time.Time{})
			w.start(pc, fresh)
		}()
	}
}

// The hello is "KITE-WAKE/1 <token> <name> <fresh>", fresh 1 while the
// sender's Open has not returned (it has committed nothing, so the
// receiver needs no Resync). The dialler sends first.
func (w *wake) sendHello(c net.Conn) error {
	w.mu.Lock()
	mine := "0"
	if !w.started {
		mine = "1"
	}
	w.mu.Unlock()
	if _, err := fmt.Fprintf(c, "%s %s %s %s\n", wakeHello, w.token, w.name, mine); err != nil {
		return fmt.Errorf("send hello: %w", err)
	}
	return nil
}

// readHello reads and checks the other side's hello. br may hold lines
// the peer sent after it.
func (w *wake) readHello(br *bufio.Reader) (peer string, fresh bool, err error) {
	line, err := br.ReadString('\n')
	if err != nil {
		return "", false, fmt.Errorf("read hello: %w", err)
	}
	f := strings.Fields(line)
	if len(f) != 4 || f[0] != wakeHello {
		return "", false, errors.New("not a kite wake-up hello")
	}
	if subtle.ConstantTimeCompare([]byte(f[1]), []byte(w.token)) != 1 {
		return "", false, errors.New("wrong token: a server of another database, or not a kite server")
	}
	if f[2] == w.name {
		return "", false, errors.New("a connection to itself")
	}
	return f[2], f[3] == "1", nil
}

// dialMissing connects to every live server that has no connection, all
// at once.
func (w *wake) dialMissing(ctx context.Context) {
	w.mu.Lock()
	var todo []string
	for name := range w.known {
		if w.byPeer[name] == 0 {
			todo = append(todo, name)
		}
	}
	addrs := make([]string, len(todo))
	for i, name := range todo {
		addrs[i] = w.known[name]
	}
	w.mu.Unlock()
	var wg sync.WaitGroup
	for i, name := range todo {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.dial(ctx, name, addrs[i])
		}()
	}
	wg.Wait()
}

func (w *wake) dial(ctx context.Context, want, addr string) {
	d := net.Dialer{Timeout: wakeDialTimeout}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		w.log.Debug("wake-ups: dial", "peer", want, "address", addr, "error", err)
		return
	}
	_ = c.SetDeadline(time.Now().Add(wakeDialTimeout))
	br := bufio.NewReader(c)
	err = w.sendHello(c)
	var peer string
	var fresh bool
	if err == nil {
		peer, fresh, err = w.readHello(br)
	}
	if err != nil {
		w.log.Warn("wake-ups: dial", "peer", want, "address", addr, "error", err)
		_ = c.Close()
		return
	}
	_ = c.SetDeadline(time.Time{})
	if peer != want {
		// The address belongs to another process now (want restarted, or
		// the port was reused): want is not waited for.
		w.mu.Lock()
		w.gone[want] = true
		w.mu.Unlock()
	}
	if pc := w.register(c, br, peer); pc != nil {
		w.start(pc, fresh)
	}
}

// peerConn is one wake-up connection, used both ways.
type peerConn struct {
	w    *wake
	c    net.Conn
	br   *bufio.Reader
	peer string
	out  chan string
	once sync.Once
	done chan struct{}
}

func (pc *peerConn) shut() {
	pc.once.Do(func() {
		close(pc.done)
		_ = pc.c.Close()
	})
}

// register makes c one of the connections commits are queued on; nil if
// the wake-ups are closing.
func (w *wake) register(c net.Conn, br *bufio.Reader, peer string) *peerConn {
	pc := &peerConn{w: w, c: c, br: br, peer: peer, out: make(chan string, wakeQueue), done: make(chan struct{})}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ctx.Err() != nil {
		_ = c.Close()
		return nil
	}
	w.conns[pc] = struct{}{}
	w.byPeer[peer]++
	return pc
}

// start runs the connection's reader and writer. A connection made after
// this server started may follow lost wake-ups, unless its peer was only
// starting itself: then the Store resyncs.
func (w *wake) start(pc *peerConn, fresh bool) {
	w.mu.Lock()
	resync := w.started && !fresh
	w.mu.Unlock()
	w.log.Debug("wake-ups: connected", "peer", pc.peer)
	w.wg.Add(2)
	go pc.write()
	go pc.read()
	if resync {
		w.reconnects.Add(1)
		w.notify(mvcc.Notice{Resync: true})
	}
	w.poke()
}

// drop forgets a closed connection and has maintain look at once whether
// its server is still alive.
func (w *wake) drop(pc *peerConn) {
	pc.shut()
	w.mu.Lock()
	if _, ok := w.conns[pc]; ok {
		delete(w.conns, pc)
		if w.byPeer[pc.peer]--; w.byPeer[pc.peer] <= 0 {
			delete(w.byPeer, pc.peer)
		}
	}
	w.mu.Unlock()
	w.poke()
}

func (w *wake) poke() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

func (pc *peerConn) write() {
	w := pc.w
	defer w.wg.Done()
	defer w.drop(pc)
	bw := bufio.NewWriter(pc.c)
	tick := time.NewTicker(wakeHeartbeat)
	defer tick.Stop()
	for {
		select {
		case <-pc.done:
			return
		case <-w.ctx.Done():
			return
		case line := <-pc.out:
			bw.WriteString(line + "\n")
		more:
			for {
				select {
				case line := <-pc.out:
					bw.WriteString(line + "\n")
				default:
					break more
				}
			}
		case <-tick.C:
			bw.WriteString("h " + strconv.FormatInt(w.head.Load(), 10) + "\n")
		}
		_ = pc.c.SetWriteDeadline(time.Now().Add(wakeWriteTimeout))
		if err := bw.Flush(); err != nil {
			if w.ctx.Err() == nil {
				w.log.Warn("wake-up connection lost", "peer", pc.peer, "error", err)
			}
			return
		}
	}
}

func (pc *peerConn) read() {
	w := pc.w
	defer w.wg.Done()
	defer w.drop(pc)
	sc := bufio.NewScanner(pc.br)
	for {
		_ = pc.c.SetReadDeadline(time.Now().Add(wakeSilence))
		if !sc.Scan() {
			if err := sc.Err(); err != nil && w.ctx.Err() == nil {
				select {
				case <-pc.done:
				default:
					w.log.Warn("wake-up connection lost", "peer", pc.peer, "error", err)
				}
			}
			return
		}
		kind, n, ok := parseWake(sc.Text())
		if !ok {
			w.log.Warn("wake-ups: malformed line, closing", "peer", pc.peer, "line", sc.Text())
			return
		}
		if kind == 'c' {
			w.received.Add(1)
		}
		// A revision already told of, with nothing else changed, is no
		// news (most heartbeats).
		if kind != 'r' && !w.advance(n.Rev) && n.Changed == 0 {
			continue
		}
		if !w.notify(n) {
			return
		}
	}
}

// parseWake reads "c <rev> <changed>", "r <id>" or "h <rev>" into its
// kind and notice.
func parseWake(line string) (kind byte, n mvcc.Notice, ok bool) {
	f := strings.Fields(line)
	num := func(s string) (int64, bool) {
		v, err := strconv.ParseInt(s, 10, 64)
		return v, err == nil && v >= 0
	}
	switch {
	case len(f) == 3 && f[0] == "c":
		rev, ok1 := num(f[1])
		changed, ok2 := num(f[2])
		if ok1 && ok2 && changed <= int64(allChanged) {
			return 'c', mvcc.Notice{Rev: rev, Changed: mvcc.Changed(changed)}, true
		}
	case len(f) == 2 && f[0] == "r":
		if id, ok := num(f[1]); ok && id != 0 {
			return 'r', mvcc.Notice{Renewed: id}, true
		}
	case len(f) == 2 && f[0] == "h":
		if rev, ok := num(f[1]); ok {
			return 'h', mvcc.Notice{Rev: rev}, true
		}
	}
	return 0, mvcc.Notice{}, false
}

// maintain keeps this server's row fresh, reads which servers are alive,
// dials those it has no connection to, and polls while any stays
// unreachable.
func (w *wake) maintain() {
	defer w.wg.Done()
	lastAlive := time.Now()
	t := time.NewTimer(aliveEvery)
	defer t.Stop()
	for {
		select {
		case <-w.ctx.Done():
			return
		case <-t.C:
		case <-w.kick:
		}
		ctx, cancel := context.WithTimeout(w.ctx, aliveEvery)
		if time.Since(lastAlive) >= aliveEvery {
			if _, err := w.db.ExecContext(ctx, sqlAlive, w.name, w.addr); err != nil {
				w.log.Warn("wake-ups: refresh registration", "error", err)
			} else {
				lastAlive = time.Now()
			}
			if _, err := w.db.ExecContext(ctx, sqlForgetServers, -forgetAfter.Microseconds()); err != nil {
				w.log.Debug("wake-ups: forget old servers", "error", err)
			}
		}
		if err := w.refresh(ctx); err != nil {
			w.log.Warn("wake-ups: read servers", "error", err)
		}
		w.dialMissing(ctx)
		degraded := w.unreachable() > 0
		if degraded != w.degraded.Swap(degraded) {
			if degraded {
				w.log.Warn("wake-ups: a server is unreachable; polling the database every second until it is back")
			} else {
				w.log.Info("wake-ups: every server reachable again; polling stopped")
			}
		}
		if degraded {
			w.poll(ctx)
		}
		cancel()
		if degraded {
			t.Reset(pollEvery)
		} else {
			t.Reset(aliveEvery)
		}
	}
}

// refresh reads the live servers from kite_server.
func (w *wake) refresh(ctx context.Context) error {
	rows, err := w.db.QueryContext(ctx, sqlServers, -aliveFor.Microseconds(), w.name)
	if err != nil {
		return fmt.Errorf("wake-ups: read servers: %w", err)
	}
	defer rows.Close()
	known := map[string]string{}
	for rows.Next() {
		var name, addr string
		if err := rows.Scan(&name, &addr); err != nil {
			return fmt.Errorf("wake-ups: read servers: %w", err)
		}
		known[name] = addr
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("wake-ups: read servers: %w", err)
	}
	w.mu.Lock()
	for name := range w.gone {
		if _, ok := known[name]; !ok {
			delete(w.gone, name)
		}
	}
	for name := range w.gone {
		delete(known, name)
	}
	w.known = known
	w.mu.Unlock()
	return nil
}

// unreachable counts the live servers with no connection.
func (w *wake) unreachable() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for name := range w.known {
		if w.byPeer[name] == 0 {
			n++
		}
	}
	return n
}

// poll is the fallback: one read of the current revision.
func (w *wake) poll(ctx context.Context) {
	var rev int64
	if err := w.db.QueryRowContext(ctx, `SELECT current_rev FROM kite_revision WHERE id = 1`).Scan(&rev); err != nil {
		w.log.Debug("wake-ups: poll", "error", err)
		return
	}
	w.polls.Add(1)
	if w.advance(rev) {
		w.notify(mvcc.Notice{Rev: rev, Changed: allChanged})
	}
}

// peers counts the servers this one has a connection with.
func (w *wake) peers() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.byPeer)
}

// close leaves kite_server first, so the others do not wait for this
// server, then closes every connection and the notices.
func (w *wake) close() { w.closeOnce.Do(w.shutdown) }

func (w *wake) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_, _ = w.db.ExecContext(ctx, sqlLeave, w.name)
	cancel()
	w.mu.Lock()
	w.cancel()
	for pc := range w.conns {
		pc.shut()
	}
	w.mu.Unlock()
	_ = w.ln.Close()
	w.wg.Wait()
	close(w.ch)
}
