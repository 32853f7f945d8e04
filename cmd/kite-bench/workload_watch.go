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
	prefix := e.prefix(s.label)
	nw, ne := e.cfg.watchers, e.cfg.events
	// Watching from a fixed start revision makes a watcher that registers
	// late replay what it missed instead of losing it: "missed" then means
	// the server lost an event, never that the benchmark started too early.
	head, err := e.conn(0).Get(ctx, prefix, clientv3.WithCountOnly())
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
		ch := e.conn(i).Watch(watchCtx, prefix, clientv3.WithPrefix(), clientv3.WithRev(startRev), clientv3.WithCreatedNotify())
		wg.Go(func() { w.consume(watchCtx, ch, created.Done) })
	}
	// Stop and wait for the watchers on every return (defers run in reverse).
	defer wg.Wait()
	defer stopWatch()
	if err := waitGroupCtx(ctx, &created, 30*time.Second); err != nil {
		return result{}, fmt.Errorf("create %d watchers: %w", nw, err)
	}

	ack, written, first, err := writeEvents(ctx, e, prefix, ne)
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

	var h histogram
	var got, dups, errs, last int64
	for _, w := range ws {
		w.mu.Lock()
		for seq := range written {
			if t := w.recv[seq]; t != 0 {
				h.record(time.Duration(t - ack[seq]))
				last = max(last, t)
			}
		}
		got += w.distinct.Load()
		dups += w.dups
		errs += w.errs
		if w.err != nil && errs <= 3 {
			e.log.Warn("watcher failed", "target", e.t.name, "error", w.err)
		}
		w.mu.Unlock()
	}
	elapsed := time.Duration(last - first)
	r := newResult(e.t.name, s, got, elapsed, &h, errs)
	r.Clients = nw
	r.Missed = want - got
	r.Duplicates = dups
	return r, nil
}

// writeEvents puts n keys one after another (paced by --watch-rate) and
// returns the acknowledgement time of each, how many were written before
// --duration ran out, and when the first write started (Unix nanoseconds).
func writeEvents(ctx context.Context, e *env, prefix string, n int) (ack []int64, written int, first int64, err error) {
	kv := e.conn(0)
	value := makeValue(e.cfg.valSize, 5)
	ack = make([]int64, n)
	var interval time.Duration
	if e.cfg.watchRate > 0 {
		interval = time.Duration(float64(time.Second) / e.cfg.watchRate)
	}
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
		opCtx, cancel := context.WithTimeout(ctx, e.cfg.opTimeout)
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
