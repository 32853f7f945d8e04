package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kite-db/kite/internal/latency"
)

// deliveryTimeout is how long watchers may take, after the last write, to
// receive every event before the missing ones count as missed.
const deliveryTimeout = 10 * time.Second

// runWatch: --watchers watchers on one prefix (spread over the
// connections, so each connection carries one multiplexed watch stream, as
// kube-apiserver's does), then one writer puts --events keys under it.
// Latency is from the writer's acknowledgement of a put to a watcher's
// receipt of its event; every watcher must receive every event exactly
// once, and whatever it does not (or receives twice) is counted.
//
// The workload's own clients count (s.clients) is not used: the fan-out is
// set by --watchers, and one writer keeps the event order unambiguous.
func runWatch(ctx context.Context, e *env, s spec) (result, error) {
	var interval time.Duration
	if e.cfg.watchRate > 0 {
		interval = time.Duration(float64(time.Second) / e.cfg.watchRate)
	}
	return watchDelivery(ctx, e, s, e.cfg.watchers, e.conn, e.conn(0), interval)
}

// remoteWatchRate paces watch-remote's writer when --watch-rate is not
// given: its latency is then the delivery's, not a queue's.
const remoteWatchRate = 100

// runWatchRemote: watch delivery across servers that share one database.
// The writer talks to the first server, and s.clients watchers (default
// --clients) are spread over the connections to every other server; the
// writer puts --events keys at --watch-rate (100/s if not given). Latency
// is from the put's acknowledgement to each watcher's receipt; missed and
// duplicated events are counted as in watch. A target with one server
// (etcd, or kite with --kite-servers 1) runs it with writer and watchers
// on that server, and its row says so.
func runWatchRemote(ctx context.Context, e *env, s spec) (result, error) {
	var remote []*clientv3.Client
	for i, c := range e.t.conns {
		if e.t.server[i] != e.t.server[0] {
			remote = append(remote, c)
		}
	}
	note := ""
	if len(remote) == 0 {
		remote = e.t.conns
		note = "one server: writer and watchers on the same server"
	}
	rate := e.cfg.watchRate
	if rate <= 0 {
		rate = remoteWatchRate
	}
	interval := time.Duration(float64(time.Second) / rate)
	r, err := watchDelivery(ctx, e, s, s.clients, func(i int) *clientv3.Client { return remote[i%len(remote)] }, e.conn(0), interval)
	r.Note = note
	return r, err
}

// watchDelivery runs nw watchers on one prefix, watcher i on watcherConn(i),
// and one writer on writer that puts --events keys (one every interval, or
// back to back when interval is 0), and reports the delivery latencies and
// every event missed or delivered twice.
func watchDelivery(ctx context.Context, e *env, s spec, nw int, watcherConn func(i int) *clientv3.Client, writer *clientv3.Client, interval time.Duration) (result, error) {
	prefix := e.prefix(s.label)
	ne := e.cfg.events
	// Watching from a fixed start revision makes a watcher that registers
	// late replay what it missed instead of losing it: "missed" then means
	// the server lost an event, never that the benchmark started too early.
	headCtx, headCancel := context.WithTimeout(ctx, e.cfg.OpTimeout)
	head, err := writer.Get(headCtx, prefix, clientv3.WithCountOnly())
	headCancel()
	if err != nil {
		return result{}, fmt.Errorf("read current revision: %w", err)
	}
	startRev := head.Header.Revision + 1

	watchCtx, stopWatch := context.WithCancel(ctx)
	ws := make([]*eventWatcher, nw)
	var wg sync.WaitGroup
	var created sync.WaitGroup
	for i := range ws {
		w := &eventWatcher{recv: make([]int64, ne), events: ne, prefix: prefix}
		ws[i] = w
		created.Add(1)
		ch := watcherConn(i).Watch(watchCtx, prefix, clientv3.WithPrefix(), clientv3.WithRev(startRev), clientv3.WithCreatedNotify())
		wg.Go(func() { w.consume(watchCtx, ch, created.Done) })
	}
	// Stop and wait for the watchers on every return (defers run in reverse).
	defer wg.Wait()
	defer stopWatch()
	if err := waitGroupCtx(ctx, &created, 30*time.Second); err != nil {
		return result{}, fmt.Errorf("create %d watchers: %w", nw, err)
	}

	ack, written, first, err := writeEvents(ctx, e, writer, prefix, ne, interval)
	if err != nil {
		return result{}, err
	}
	want := int64(written) * int64(nw)
	waitDelivered(ctx, ws, want)
	// A duplicate would arrive after the last first delivery; give it a
	// moment to show before counting.
	time.Sleep(100 * time.Millisecond)
	stopWatch()
	wg.Wait()

	var h latency.Histogram
	var got, dups, errs, last int64
	var firstErr string
	for _, w := range ws {
		w.mu.Lock()
		for seq := range written {
			if t := w.recv[seq]; t != 0 {
				h.Record(time.Duration(t - ack[seq]))
				last = max(last, t)
			}
		}
		got += w.distinct.Load()
		dups += w.dups
		errs += w.errs
		if w.err != nil && errs <= 3 {
			e.log.Warn("watcher failed", "target", e.t.name, "error", w.err)
		}
		if w.err != nil && firstErr == "" {
			firstErr = w.err.Error()
		}
		w.mu.Unlock()
	}
	elapsed := time.Duration(last - first)
	r := newResult(e.t.name, s, got, elapsed, &h, errs)
	r.Clients = nw
	r.Missed = want - got
	r.Duplicates = dups
	r.FirstError = firstErr
	return r, nil
}

// writeEvents puts n keys one after another on kv (one every interval, or
// back to back when it is 0) and returns the acknowledgement time of each,
// how many were written before --duration ran out, and when the first
// write started (Unix nanoseconds).
func writeEvents(ctx context.Context, e *env, kv clientv3.KV, prefix string, n int, interval time.Duration) (ack []int64, written int, first int64, err error) {
	value := makeValue(e.cfg.valSize, 5)
	ack = make([]int64, n)
	start := time.Now()
	first = start.UnixNano()
	for seq := range n {
		if e.cfg.duration > 0 && time.Since(start) > e.cfg.duration {
			break
		}
		if interval > 0 {
			if d := time.Until(start.Add(time.Duration(seq) * interval)); d > 0 {
				time.Sleep(d)
			}
		}
		opCtx, cancel := context.WithTimeout(ctx, e.cfg.OpTimeout)
		_, err := kv.Put(opCtx, key(prefix, seq), value)
		cancel()
		if err != nil {
			return nil, 0, 0, fmt.Errorf("write event %d: %w", seq, err)
		}
		ack[seq] = time.Now().UnixNano()
		written = seq + 1
	}
	return ack, written, first, nil
}

// waitDelivered returns once the watchers hold want distinct events in
// total, or deliveryTimeout after it was called.
func waitDelivered(ctx context.Context, ws []*eventWatcher, want int64) {
	deadline := time.Now().Add(deliveryTimeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		var got int64
		for _, w := range ws {
			got += w.distinct.Load()
		}
		if got >= want {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// eventWatcher records, per event sequence number, when it first arrived.
type eventWatcher struct {
	prefix   string
	events   int
	distinct atomic.Int64 // read while running by waitDelivered

	mu      sync.Mutex // guards the fields below against the final tally
	recv    []int64    // Unix nanoseconds of first receipt, 0 if not yet
	dups    int64
	errs    int64 // out-of-order or foreign events, watch errors
	lastSeq int
	err     error
}

// consume reads a watch channel until it closes. created is called once,
// on the creation notice (or when the watch ends before one arrives).
func (w *eventWatcher) consume(ctx context.Context, ch clientv3.WatchChan, created func()) {
	var once sync.Once
	defer once.Do(created)
	w.lastSeq = -1
	for resp := range ch {
		if resp.Created {
			once.Do(created)
		}
		now := time.Now().UnixNano()
		w.mu.Lock()
		if err := resp.Err(); err != nil && ctx.Err() == nil {
			w.errs++
			w.err = err
		}
		for _, ev := range resp.Events {
			seq, err := strconv.Atoi(strings.TrimPrefix(string(ev.Kv.Key), w.prefix))
			switch {
			case err != nil || seq < 0 || seq >= w.events || ev.Type != clientv3.EventTypePut:
				w.errs++
				w.err = errors.Join(w.err, fmt.Errorf("unexpected event %s %q", ev.Type, ev.Kv.Key))
			case w.recv[seq] != 0:
				w.dups++
			default:
				if seq < w.lastSeq {
					w.errs++
					w.err = fmt.Errorf("event %d arrived after event %d", seq, w.lastSeq)
				}
				w.lastSeq = seq
				w.recv[seq] = now
				w.distinct.Add(1)
			}
		}
		w.mu.Unlock()
	}
}

// waitGroupCtx waits for wg, ctx, or timeout, whichever comes first. Its
// helper goroutine ends once wg does; the callers guarantee that (every
// watcher marks itself created when it stops).
func waitGroupCtx(ctx context.Context, wg *sync.WaitGroup, timeout time.Duration) error {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(timeout):
		return fmt.Errorf("not done after %s", timeout)
	}
}
