package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// soakWatch is one watcher per prefix on one server, each holding the
// ledger it checks its events against: every write the drivers had
// acknowledged must arrive once, in revision order, as what was written.
type soakWatch struct {
	stats   *soakStats
	ledgers []*watchLedger
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// watchLedger is what one prefix's watcher must receive and what it did.
// Drivers' writes are keyed by revision: each is a transaction of one
// write, so it has a revision of its own.
type watchLedger struct {
	prefix string
	// expiring: deletes under this prefix are lease expiries (events),
	// which no driver acknowledges; they are checked against the creates.
	expiring bool

	mu      sync.Mutex
	pending map[int64]ledgerOp // acknowledged, not received yet
	early   map[int64]ledgerOp // received before the acknowledgement
	lastRev int64
	// live holds, for an expiring prefix, every event created, until its
	// expiry delete arrives (then gone is set, so a second one is a duplicate).
	live map[string]*eventLife
	n    watchCounts
}

type ledgerOp struct {
	key string
	del bool
	at  time.Time // acknowledged (pending) or received (early)
}

type eventLife struct {
	created  int64
	expireBy time.Time
	gone     bool
}

// watchCounts is the watchers' tally on one server.
type watchCounts struct {
	Received   int64 `json:"received"`     // driver writes received and matched
	Missed     int64 `json:"missed"`       // acknowledged and not received (in time)
	Duplicates int64 `json:"duplicates"`   // received again
	OutOfOrder int64 `json:"out_of_order"` // received after a later revision
	Mismatched int64 `json:"mismatched"`   // the event at a revision is not what was written there
	Unexpected int64 `json:"unexpected"`   // received, never acknowledged (only final)
	Expired    int64 `json:"expired"`      // lease-expiry deletes of events received
	Unexpired  int64 `json:"unexpired"`    // events still there well after their lease's TTL (only final)
}

// bad is the number of anomalies, each of which fails the run.
func (c watchCounts) bad() int64 {
	return c.Missed + c.Duplicates + c.OutOfOrder + c.Mismatched + c.Unexpected + c.Unexpired
}

func (c *watchCounts) add(o watchCounts) {
	c.Received += o.Received
	c.Missed += o.Missed
	c.Duplicates += o.Duplicates
	c.OutOfOrder += o.OutOfOrder
	c.Mismatched += o.Mismatched
	c.Unexpected += o.Unexpected
	c.Expired += o.Expired
	c.Unexpired += o.Unexpired
}

func newSoakWatch(stats *soakStats, prefixes []string) *soakWatch {
	w := &soakWatch{stats: stats, cancel: func() {}}
	for _, p := range prefixes {
		w.ledgers = append(w.ledgers, &watchLedger{prefix: p, expiring: p == soakEventsPrefix,
			pending: map[int64]ledgerOp{}, early: map[int64]ledgerOp{}, live: map[string]*eventLife{}})
	}
	return w
}

// start opens every watcher on cli, from the revision after the current
// one, and returns once the server confirmed them all.
func (w *soakWatch) start(ctx context.Context, cli *clientv3.Client) error {
	headCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	head, err := cli.Get(headCtx, compactRevKey, clientv3.WithCountOnly())
	cancel()
	if err != nil {
		return fmt.Errorf("read current revision: %w", err)
	}
	wctx, stop := context.WithCancel(ctx)
	w.cancel = stop
	var created sync.WaitGroup
	for _, l := range w.ledgers {
		created.Add(1)
		ch := cli.Watch(wctx, l.prefix, clientv3.WithPrefix(), clientv3.WithRev(head.Header.Revision+1), clientv3.WithCreatedNotify())
		w.wg.Go(func() { l.consume(wctx, ch, created.Done, w.stats) })
	}
	return waitGroupCtx(ctx, &created, 30*time.Second)
}

// stop ends the watchers and waits for them.
func (w *soakWatch) stop() {
	w.cancel()
	w.wg.Wait()
}

// ack records a write a driver had acknowledged at revision rev.
// expireBy, for an event, is when its lease should have deleted it.
func (w *soakWatch) ack(key string, rev int64, del bool, at, expireBy time.Time) {
	for _, l := range w.ledgers {
		if strings.HasPrefix(key, l.prefix) {
			l.ack(key, rev, del, at, expireBy)
			return
		}
	}
}

// drain waits until every acknowledged write was received, at most timeout.
func (w *soakWatch) drain(ctx context.Context, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		waiting := 0
		for _, l := range w.ledgers {
			l.mu.Lock()
			waiting += len(l.pending)
			l.mu.Unlock()
		}
		if waiting == 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// counts is the tally at now. Until final, a write counts as missed once
// it has waited deliveryTimeout; at the end (after drain) every write not
// received is missed, every event received and never acknowledged is
// unexpected, and every event past its lease's expiry is unexpired.
func (w *soakWatch) counts(now time.Time, final bool) watchCounts {
	var c watchCounts
	for _, l := range w.ledgers {
		c.add(l.counts(now, final))
	}
	return c
}

func (l *watchLedger) ack(key string, rev int64, del bool, at, expireBy time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.expiring && !del {
		l.live[key] = &eventLife{created: rev, expireBy: expireBy}
	}
	op := ledgerOp{key: key, del: del, at: at}
	if got, ok := l.early[rev]; ok {
		delete(l.early, rev)
		l.match(op, got)
		return
	}
	l.pending[rev] = op
}

// match counts a received event against the write made at its revision.
func (l *watchLedger) match(want, got ledgerOp) {
	l.n.Received++
	if want.key != got.key || want.del != got.del {
		l.n.Mismatched++
	}
}

// event checks one received event.
func (l *watchLedger) event(ev *clientv3.Event, now time.Time) {
	rev, key, del := ev.Kv.ModRevision, string(ev.Kv.Key), ev.Type == mvccpb.DELETE
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.expiring && del {
		l.expiry(rev, key)
		return
	}
	got := ledgerOp{key: key, del: del, at: now}
	if rev <= l.lastRev {
		// Each driver write has a revision of its own, so this one came
		// after a later one: out of order if it is new, else a repeat.
		if want, ok := l.pending[rev]; ok {
			delete(l.pending, rev)
			l.match(want, got)
			l.n.OutOfOrder++
		} else {
			l.n.Duplicates++
		}
		return
	}
	l.lastRev = rev
	if want, ok := l.pending[rev]; ok {
		delete(l.pending, rev)
		l.match(want, got)
		return
	}
	// The event may arrive before its writer has the answer.
	l.early[rev] = got
}

// expiry checks an event's delete by its lease's expiry: one per created
// event, after its create. Several events on one lease go at one revision.
func (l *watchLedger) expiry(rev int64, key string) {
	if rev < l.lastRev {
		l.n.OutOfOrder++
	}
	l.lastRev = max(l.lastRev, rev)
	life, ok := l.live[key]
	switch {
	case ok && life.gone:
		l.n.Duplicates++
	case ok && rev > life.created:
		life.gone = true
		l.n.Expired++
	case ok:
		l.n.OutOfOrder++
	default:
		// Not (yet) acknowledged as created: a create cannot be acknowledged
		// a whole TTL late, so this delete is nothing the drivers made.
		l.n.Unexpected++
	}
}

func (l *watchLedger) counts(now time.Time, final bool) watchCounts {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.n
	for _, op := range l.pending {
		if final || now.Sub(op.at) > deliveryTimeout {
			c.Missed++
		}
	}
	if final {
		c.Unexpected += int64(len(l.early))
		for _, life := range l.live {
			if !life.gone && life.expireBy.Before(now) {
				c.Unexpired++
			}
		}
	}
	return c
}

// consume reads the watch channel until it closes. created is called once,
// on the creation notice (or when the watch ends before one arrives).
func (l *watchLedger) consume(ctx context.Context, ch clientv3.WatchChan, created func(), stats *soakStats) {
	var once sync.Once
	defer once.Do(created)
	for resp := range ch {
		if resp.Created {
			once.Do(created)
		}
		if err := resp.Err(); err != nil && ctx.Err() == nil {
			stats.fail("watch", fmt.Errorf("watch on %s: %w", l.prefix, err))
		}
		now := time.Now()
		for _, ev := range resp.Events {
			l.event(ev, now)
		}
	}
	if ctx.Err() == nil {
		stats.fail("watch", fmt.Errorf("watch on %s closed by the server", l.prefix))
	}
}

// deliveryTimeout is how long a write may wait for its watch event before
// it counts as missed (kite-bench's watch workloads wait as long).
const deliveryTimeout = 10 * time.Second

// waitGroupCtx waits for wg, ctx or timeout, whichever comes first.
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
