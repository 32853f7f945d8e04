package test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Helpers for tests that run several kite servers on one database: a
// watcher on every server, a writer on every server, and the checks of
// what the watchers saw.

// seenEvent is one watch event as every server must report it.
type seenEvent struct {
	Rev   int64
	Type  mvccpb.Event_EventType
	Key   string
	Value string
	Prev  string // prev_kv value ("" when none)
}

// watchers records, on each server, every event under a prefix from
// revision 1 on. A stream cut by a restart (of kite or of the database) is
// resumed from the revision after the last event it delivered.
type watchers struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mus    []sync.Mutex
	events [][]seenEvent
}

func watchEvery(ctx context.Context, t *testing.T, ks []*kiteProcess, prefix string) *watchers {
	ctx, cancel := context.WithCancel(ctx)
	w := &watchers{cancel: cancel, mus: make([]sync.Mutex, len(ks)), events: make([][]seenEvent, len(ks))}
	for i, k := range ks {
		w.wg.Go(func() {
			if err := w.record(ctx, i, k.Endpoint, prefix); err != nil {
				t.Errorf("watch on server %d: %v", i, err)
			}
		})
	}
	return w
}

func (w *watchers) record(ctx context.Context, i int, endpoint, prefix string) error {
	c, err := newClient(endpoint)
	if err != nil {
		return err
	}
	defer c.Close()
	next := int64(1)
	for ctx.Err() == nil {
		wch := c.Watch(clientv3.WithRequireLeader(ctx), prefix, clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithRev(next))
		for resp := range wch {
			if resp.Err() != nil {
				break
			}
			w.mus[i].Lock()
			for _, ev := range resp.Events {
				se := seenEvent{Rev: ev.Kv.ModRevision, Type: ev.Type, Key: string(ev.Kv.Key), Value: string(ev.Kv.Value)}
				if ev.PrevKv != nil {
					se.Prev = string(ev.PrevKv.Value)
				}
				w.events[i] = append(w.events[i], se)
				next = ev.Kv.ModRevision + 1
			}
			w.mus[i].Unlock()
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// count returns how many events watcher i has seen and the last revision.
func (w *watchers) count(i int) (n int, last int64) {
	w.mus[i].Lock()
	defer w.mus[i].Unlock()
	if n = len(w.events[i]); n > 0 {
		last = w.events[i][n-1].Rev
	}
	return n, last
}

// waitFor waits until every watcher has seen revision rev.
func (w *watchers) waitFor(t *testing.T, ks []*kiteProcess, rev int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for i := range w.events {
		for {
			n, last := w.count(i)
			if last >= rev {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("server %d's watcher has not reached revision %d (has %d events)\nlog:\n%s", i, rev, n, ks[i].log.Tail(4096))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// stop ends the watches and returns what each saw.
func (w *watchers) stop() [][]seenEvent {
	w.cancel()
	w.wg.Wait()
	return w.events
}

// ack is a write the server acknowledged; value "" for a delete.
type ack struct {
	key, value string
	rev        int64
}

// writers run one writer per server until stop: write(c, server, n) sends
// the n-th request of a server's writer and returns the write it
// acknowledged (rev 0: nothing was written) or its error.
type writers struct {
	stopc  chan struct{}
	wg     sync.WaitGroup
	mu     sync.Mutex
	acks   []ack
	failed []int
}

func startWriters(ctx context.Context, t *testing.T, ks []*kiteProcess,
	write func(ctx context.Context, c *clientv3.Client, server, n int) (ack, error)) *writers {
	w := &writers{stopc: make(chan struct{}), failed: make([]int, len(ks))}
	for i, k := range ks {
		w.wg.Go(func() {
			c, err := newClient(k.Endpoint)
			if err != nil {
				t.Errorf("client %d: %v", i, err)
				return
			}
			defer c.Close()
			for n := 0; ; n++ {
				select {
				case <-w.stopc:
					return
				default:
				}
				wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				a, err := write(wctx, c, i, n)
				cancel()
				w.mu.Lock()
				switch {
				case err != nil:
					w.failed[i]++ // not acknowledged: nothing to check
				case a.rev != 0:
					w.acks = append(w.acks, a)
				}
				w.mu.Unlock()
				if err != nil {
					time.Sleep(20 * time.Millisecond)
				}
			}
		})
	}
	return w
}

// failures is how many writes have failed so far, on every server.
func (w *writers) failures() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, f := range w.failed {
		n += f
	}
	return n
}

// stop ends the writers and returns the acknowledged writes and the
// failures per server.
func (w *writers) stop() ([]ack, []int) {
	close(w.stopc)
	w.wg.Wait()
	return w.acks, w.failed
}

// putDeleteWriter is a startWriters write function: puts, and now and then a
// delete, on keys of each writer's own under prefix.
func putDeleteWriter(prefix string) func(ctx context.Context, c *clientv3.Client, i, n int) (ack, error) {
	return func(ctx context.Context, c *clientv3.Client, i, n int) (ack, error) {
		key := fmt.Sprintf("%ss%d/k%02d", prefix, i, rand.IntN(20))
		if n%10 == 9 {
			resp, err := c.Delete(ctx, key)
			if err != nil || resp.Deleted == 0 {
				return ack{}, err
			}
			return ack{key, "", resp.Header.Revision}, nil
		}
		value := fmt.Sprintf("v%d-%d", i, n)
		resp, err := c.Put(ctx, key, value)
		if err != nil {
			return ack{}, err
		}
		return ack{key, value, resp.Header.Revision}, nil
	}
}

// checkOneOrder checks that every server's watcher saw the same sequence,
// that its revisions are dense up to last, and that every acknowledged
// write is in it.
func checkOneOrder(t *testing.T, events [][]seenEvent, last int64, acks []ack) {
	t.Helper()
	for i := 1; i < len(events); i++ {
		if !slices.Equal(events[0], events[i]) {
			t.Errorf("server %d saw %d events, server 0 %d; first difference at %d",
				i, len(events[i]), len(events[0]), firstDiff(events[0], events[i]))
		}
	}
	if len(events[0]) == 0 {
		t.Fatal("the watchers saw no event")
	}
	byRev := map[int64][]seenEvent{}
	for _, ev := range events[0] {
		byRev[ev.Rev] = append(byRev[ev.Rev], ev)
	}
	for rev := events[0][0].Rev; rev <= last; rev++ {
		if len(byRev[rev]) == 0 {
			t.Errorf("revision %d missing from the watch sequence (revisions must be dense)", rev)
		}
	}
	for _, a := range acks {
		evs := byRev[a.rev]
		if !slices.ContainsFunc(evs, func(e seenEvent) bool { return e.Key == a.key && e.Value == a.value }) {
			t.Errorf("acknowledged write %q=%q at revision %d not seen by the watchers (got %v)", a.key, a.value, a.rev, evs)
		}
	}
}

func firstDiff(a, b []seenEvent) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// checkHashKV checks that every server gives the same HashKV at rev.
func checkHashKV(ctx context.Context, t *testing.T, ks []*kiteProcess, rev int64) {
	t.Helper()
	var hashes []uint32
	for i, k := range ks {
		h, err := k.Maint.HashKV(ctx, &pb.HashKVRequest{Revision: rev})
		if err != nil {
			t.Fatalf("HashKV on server %d: %v", i, err)
		}
		hashes = append(hashes, h.Hash)
	}
	for i := 1; i < len(hashes); i++ {
		if hashes[i] != hashes[0] {
			t.Errorf("HashKV at revision %d differs between servers: %v", rev, hashes)
			return
		}
	}
}
