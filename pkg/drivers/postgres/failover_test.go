package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/kite-db/kite/pkg/drivers/postgres"
	"github.com/kite-db/kite/pkg/drivers/postgres/pgtest"
	"github.com/kite-db/kite/pkg/mvcc"
)

// server is one kite server's storage side: a Backend and its Store.
type server struct {
	name  string
	b     *postgres.Backend
	store *mvcc.Store
}

// openServer opens a Backend and a Store on dsn, closed when t ends.
func openServer(t *testing.T, name, dsn string) *server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := postgres.Open(ctx, dsn, postgres.Options{})
	if err != nil {
		t.Fatalf("%s: open backend: %v", name, err)
	}
	s, err := mvcc.Open(ctx, b, mvcc.Config{})
	if err != nil {
		b.Close()
		t.Fatalf("%s: open store: %v", name, err)
	}
	t.Cleanup(func() {
		s.Close()
		b.Close()
	})
	return &server{name: name, b: b, store: s}
}

// put is one acknowledged write.
type put struct {
	key, value string
	rev        int64
}

// load writes keys through one server until stopped, each request with
// its own deadline, and keeps what was acknowledged and how long the
// slowest answer took.
type load struct {
	srv     *server
	timeout time.Duration
	stop    chan struct{}
	done    chan struct{}

	mu      sync.Mutex
	acked   []put
	ackedAt []time.Time
	lastErr error
	errs    int
	slowest time.Duration
}

func startLoad(srv *server, timeout time.Duration) *load {
	l := &load{srv: srv, timeout: timeout, stop: make(chan struct{}), done: make(chan struct{})}
	go l.run()
	return l
}

func (l *load) run() {
	defer close(l.done)
	for i := 0; ; i++ {
		select {
		case <-l.stop:
			return
		default:
		}
		key, value := fmt.Sprintf("k/%s/%06d", l.srv.name, i), fmt.Sprintf("v%d-%d", i, time.Now().UnixNano())
		ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
		start := time.Now()
		resp, err := l.srv.store.Put(ctx, &pb.PutRequest{Key: []byte(key), Value: []byte(value)})
		took := time.Since(start)
		cancel()
		l.mu.Lock()
		l.slowest = max(l.slowest, took)
		if err == nil {
			l.acked = append(l.acked, put{key: key, value: value, rev: resp.Header.Revision})
			l.ackedAt = append(l.ackedAt, time.Now())
		} else {
			l.lastErr, l.errs = err, l.errs+1
		}
		l.mu.Unlock()
		if err != nil {
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// halt stops the load and waits for its last request.
func (l *load) halt() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	<-l.done
}

// ackedSince counts the writes acknowledged after t.
func (l *load) ackedSince(t time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, at := range l.ackedAt {
		if at.After(t) {
			n++
		}
	}
	return n
}

func (l *load) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

func (l *load) err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastErr
}

// watchAll watches every key under "k/" from revision from and records
// the events and whether the watcher was cancelled.
type watchAll struct {
	mu       sync.Mutex
	revs     []int64
	events   map[string]string // key -> value, by the events seen
	canceled bool
	ws       *mvcc.WatchStream
}

func startWatch(srv *server, from int64) *watchAll {
	w := &watchAll{events: map[string]string{}, ws: srv.store.NewWatchStream()}
	w.ws.Watch(&pb.WatchCreateRequest{Key: []byte("k/"), RangeEnd: []byte("k0"), StartRevision: from})
	go func() {
		for r := range w.ws.Responses() {
			w.mu.Lock()
			if r.Canceled {
				w.canceled = true
			}
			for _, ev := range r.Events {
				w.revs = append(w.revs, ev.Kv.ModRevision)
				w.events[string(ev.Kv.Key)] = string(ev.Kv.Value)
			}
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *watchAll) last() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.revs) == 0 {
		return 0
	}
	return w.revs[len(w.revs)-1]
}

// checkOrdered fails t if the watcher saw a revision twice or out of
// order: a revision number handed out again.
func (w *watchAll) checkOrdered(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := 1; i < len(w.revs); i++ {
		if w.revs[i] <= w.revs[i-1] {
			t.Fatalf("watcher saw revision %d after %d: a revision was handed out again", w.revs[i], w.revs[i-1])
		}
	}
}

// checkComplete fails t unless the watcher, if not cancelled, saw every
// revision from first to upTo (each put is one revision) with the values
// acknowledged.
func (w *watchAll) checkComplete(t *testing.T, first, upTo int64, acked []put) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for w.last() < upTo && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	w.checkOrdered(t)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.canceled {
		return // the client resumes from its last revision
	}
	next := first
	for _, r := range w.revs {
		if r != next {
			t.Fatalf("watcher: revision %d after %d: a gap", r, next-1)
		}
		next++
	}
	if next <= upTo {
		t.Fatalf("watcher stopped at revision %d, want %d", next-1, upTo)
	}
	for _, p := range acked {
		if w.events[p.key] != p.value {
			t.Fatalf("watcher: %s = %q, acknowledged %q at revision %d", p.key, w.events[p.key], p.value, p.rev)
		}
	}
}

// checkStored fails t unless every acknowledged put is in the store with
// its value and revision.
func checkStored(t *testing.T, srv *server, acked []put) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	resp, err := srv.store.Range(ctx, &pb.RangeRequest{Key: []byte("k/"), RangeEnd: []byte("k0")})
	if err != nil {
		t.Fatalf("%s: range: %v", srv.name, err)
	}
	got := map[string]put{}
	for _, kv := range resp.Kvs {
		got[string(kv.Key)] = put{key: string(kv.Key), value: string(kv.Value), rev: kv.ModRevision}
	}
	for _, p := range acked {
		if got[p.key] != p {
			t.Fatalf("%s: acknowledged %+v, stored %+v", srv.name, p, got[p.key])
		}
	}
}

// await polls cond until it holds or d passes.
func await(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (l *load) all() []put {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]put(nil), l.acked...)
}

// An asynchronous standby that missed acknowledged commits is promoted:
// every server must refuse it rather than number revisions again, and
// only the operator's accept-history lets a restarted server serve it.
func TestFailoverAsyncStandbyBehindRefuses(t *testing.T) {
	pair := pgtest.NewPair(t, false)
	dsn := pair.DSN()
	a, b := openServer(t, "a", dsn), openServer(t, "b", dsn)
	w := startWatch(b, 1)
	la, lb := startLoad(a, 2*time.Second), startLoad(b, 2*time.Second)
	defer la.halt()
	defer lb.halt()
	await(t, waitFor, "writes through both servers", func() bool { return la.count() > 20 && lb.count() > 20 })

	// The standby stops receiving; the primary goes on acknowledging.
	pair.Standby.Stop(t, "immediate")
	before := la.count() + lb.count()
	await(t, waitFor, "writes the standby never got", func() bool { return la.count()+lb.count() > before+100 })
	served, _ := b.store.Revisions()
	pair.Primary.Stop(t, "immediate")
	stopped := time.Now()
	pair.Standby.Start(t)
	pair.Standby.Promote(t)

	for _, l := range []*load{la, lb} {
		await(t, 20*time.Second, l.srv.name+" refusing with ErrHistoryLost", func() bool {
			return errors.Is(l.err(), mvcc.ErrHistoryLost)
		})
	}
	time.Sleep(500 * time.Millisecond)
	la.halt()
	lb.halt()
	if n := la.ackedSince(stopped) + lb.ackedSince(stopped); n != 0 {
		t.Fatalf("%d writes acknowledged on the promoted standby's older history", n)
	}
	w.checkOrdered(t)
	ctx := context.Background()
	for _, srv := range []*server{a, b} {
		if _, err := srv.store.Range(ctx, &pb.RangeRequest{Key: []byte("health"), Serializable: true}); !errors.Is(err, mvcc.ErrHistoryLost) {
			t.Fatalf("%s: serializable read (what /readyz does): %v, want ErrHistoryLost", srv.name, err)
		}
		alarms, err := srv.store.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_GET})
		if err != nil || len(alarms.Alarms) != 1 || alarms.Alarms[0].Alarm != pb.AlarmType_CORRUPT {
			t.Fatalf("%s: alarms %v, %v: want CORRUPT", srv.name, alarms.GetAlarms(), err)
		}
	}
	// A server started now refuses as well.
	if b, err := postgres.Open(ctx, dsn, postgres.Options{}); !errors.Is(err, mvcc.ErrHistoryLost) {
		if err == nil {
			b.Close()
		}
		t.Fatalf("open on the lost history: %v, want ErrHistoryLost", err)
	}

	before2, after, err := postgres.AcceptHistory(ctx, dsn, nil)
	if err != nil {
		t.Fatal(err)
	}
	if before2.Rev >= served || after.Recorded != before2.Current || after.Recorded == before2.Recorded {
		t.Fatalf("accept-history: before %+v, after %+v, served revision %d", before2, after, served)
	}
	c := openServer(t, "c", dsn)
	if _, err := c.store.Put(ctx, &pb.PutRequest{Key: []byte("k/c"), Value: []byte("after")}); err != nil {
		t.Fatalf("restarted server after accept-history: %v", err)
	}
	// The servers that served the lost revisions stay refusing.
	if _, err := a.store.Put(ctx, &pb.PutRequest{Key: []byte("k/a"), Value: []byte("x")}); !errors.Is(err, mvcc.ErrHistoryLost) {
		t.Fatalf("server that served the lost history: %v, want ErrHistoryLost", err)
	}
}

// A synchronous standby promoted after the primary stopped holds every
// acknowledged commit: every server goes on within seconds and loses
// nothing, and watchers see no gap.
func TestFailoverSynchronousStandby(t *testing.T) {
	pair := pgtest.NewPair(t, true)
	dsn := pair.DSN()
	a, b := openServer(t, "a", dsn), openServer(t, "b", dsn)
	first, _ := b.store.Revisions()
	w := startWatch(b, first+1)
	la, lb := startLoad(a, 3*time.Second), startLoad(b, 3*time.Second)
	defer la.halt()
	defer lb.halt()
	await(t, waitFor, "writes through both servers", func() bool { return la.count() > 20 && lb.count() > 20 })

	pair.Primary.Stop(t, "immediate")
	pair.Standby.Promote(t)
	promoted := time.Now()
	for _, l := range []*load{la, lb} {
		await(t, 15*time.Second, l.srv.name+" writing on the promoted standby", func() bool {
			return l.ackedSince(promoted) > 5
		})
	}
	la.halt()
	lb.halt()
	acked := append(la.all(), lb.all()...)
	var upTo int64
	for _, p := range acked {
		upTo = max(upTo, p.rev)
	}
	checkStored(t, a, acked)
	checkStored(t, b, acked)
	w.checkComplete(t, first+1, upTo, acked)

	var h postgres.History
	if err := pair.Standby.QueryRow(t, `SELECT timeline FROM kite_revision`, &h.Recorded); err != nil {
		t.Fatal(err)
	}
	if h.Recorded < 2 {
		t.Fatalf("recorded timeline %d after the promotion, want the new one", h.Recorded)
	}
}

// Kite's connections are cut again and again under load: kite reconnects,
// loses nothing acknowledged, and no request outlives its deadline.
func TestTerminatedConnectionsUnderLoad(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	a, b := openServer(t, "a", dsn), openServer(t, "b", dsn)
	first, _ := b.store.Revisions()
	w := startWatch(b, first+1)
	const deadline = 2 * time.Second
	la, lb := startLoad(a, deadline), startLoad(b, deadline)
	defer la.halt()
	defer lb.halt()
	conn := adminConn(t, dsn)
	for range 5 {
		time.Sleep(300 * time.Millisecond)
		if _, err := conn.Exec(context.Background(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name LIKE 'kite:%'`); err != nil {
			t.Fatal(err)
		}
	}
	cut := time.Now()
	for _, l := range []*load{la, lb} {
		await(t, 15*time.Second, l.srv.name+" writing again", func() bool { return l.ackedSince(cut) > 5 })
	}
	la.halt()
	lb.halt()
	for _, l := range []*load{la, lb} {
		if l.slowest > deadline+time.Second {
			t.Fatalf("%s: a request took %v, past its %v deadline", l.srv.name, l.slowest, deadline)
		}
	}
	acked := append(la.all(), lb.all()...)
	var upTo int64
	for _, p := range acked {
		upTo = max(upTo, p.rev)
	}
	checkStored(t, a, acked)
	checkStored(t, b, acked)
	w.checkComplete(t, first+1, upTo, acked)
}

// adminConn is a connection of the test's own to dsn, closed when t ends.
func adminConn(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// A primary whose database stops answering (every packet dropped, or the
// database machine hung: here its processes are SIGSTOPped) steps down
// before the database would drop its session and hand the lock to another
// server, about 11 s (the server keepalives), so no two servers run lease
// expiry at once. When the database answers again, it competes for the
// lock anew.
func TestPrimaryStepsDownWhenDatabaseStopsAnswering(t *testing.T) {
	pair := pgtest.NewPair(t, false)
	a := openServer(t, "a", pair.Primary.DSN())
	await(t, waitFor, "a primary", a.store.Primary)
	pair.Primary.Freeze(t)
	frozen := time.Now()
	await(t, 9*time.Second, "the primary stepping down while the database does not answer", func() bool {
		return !a.store.Primary()
	})
	t.Logf("stepped down %v after the database stopped answering", time.Since(frozen).Round(100*time.Millisecond))
	pair.Primary.Thaw(t)
	await(t, 30*time.Second, "the primary lock taken again once the database answers", a.store.Primary)
}
