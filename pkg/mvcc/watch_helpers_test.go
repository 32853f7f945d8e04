package mvcc

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// memLog is an in-memory revision log that behaves as a driver's log does
// for the hub: the writer appends a revision's rows and then publishes them;
// history reads rows of a consistent state, and compaction removes rows the
// way Backend.CompactBatch does. It also keeps the live keys so that test
// writes get etcd's versions and PrevKV.
type memLog struct {
	mu        sync.Mutex
	rows      []Change // in (revision, sub) order, PrevKV always filled
	live      map[string]*mvccpb.KeyValue
	rev       int64
	compacted int64
	failNext  int           // history calls left to fail
	gate      chan struct{} // when set, history waits for it to close
	reads     atomic.Int64
	hub       *watchHub
}

type op struct {
	del bool
	key string
	val string
}

func put(key, val string) op { return op{key: key, val: val} }
func del(key string) op      { return op{del: true, key: key} }

func newMemLog(rev int64) *memLog {
	return &memLog{live: make(map[string]*mvccpb.KeyValue), rev: rev}
}

// commit appends one revision made of ops and returns its changes. Deleting a
// missing key is skipped, as etcd's DeleteRange writes nothing for it; ops
// that change nothing make no revision.
func (l *memLog) commit(ops ...op) (int64, []Change) {
	l.mu.Lock()
	defer l.mu.Unlock()
	rev := l.rev + 1
	var changes []Change
	for _, o := range ops {
		prev := l.live[o.key]
		c := Change{Sub: int64(len(changes)), PrevKV: prev}
		if o.del {
			if prev == nil {
				continue
			}
			c.Deleted = true
			c.KV = &mvccpb.KeyValue{Key: []byte(o.key), ModRevision: rev}
			delete(l.live, o.key)
		} else {
			kv := &mvccpb.KeyValue{Key: []byte(o.key), Value: []byte(o.val), ModRevision: rev, CreateRevision: rev, Version: 1}
			if prev != nil {
				kv.CreateRevision, kv.Version = prev.CreateRevision, prev.Version+1
			}
			c.KV = kv
			l.live[o.key] = kv
		}
		changes = append(changes, c)
	}
	if len(changes) == 0 {
		return l.rev, nil
	}
	l.rev = rev
	l.rows = append(l.rows, changes...)
	return rev, changes
}

// write commits ops and publishes the revision, as the store's writer does.
func (l *memLog) write(ops ...op) int64 {
	rev, changes := l.commit(ops...)
	if len(changes) > 0 {
		l.hub.publish(rev, changes)
	}
	return rev
}

func (l *memLog) history(ctx context.Context, from, to int64, limit int, withPrev bool) ([]Change, int64, error) {
	l.reads.Add(1)
	l.mu.Lock()
	gate := l.gate
	l.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failNext > 0 {
		l.failNext--
		return nil, 0, fmt.Errorf("injected failure")
	}
	var out []Change
	for _, c := range l.rows {
		r := changeRev(c)
		if r < from || r > to {
			continue
		}
		if len(out) == limit {
			break
		}
		if !withPrev {
			c.PrevKV = nil
		}
		out = append(out, c)
	}
	return out, l.compacted, nil
}

func (l *memLog) compactedRev() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.compacted
}

// compact removes rows no longer visible at rev: versions superseded by a
// newer row at or below rev, and tombstones at or below rev.
func (l *memLog) compact(rev int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	newest := make(map[string]int64)
	for _, c := range l.rows {
		if r := changeRev(c); r <= rev {
			newest[string(c.KV.Key)] = r
		}
	}
	kept := l.rows[:0:0]
	for _, c := range l.rows {
		r := changeRev(c)
		if r <= rev && (c.Deleted || newest[string(c.KV.Key)] != r) {
			continue
		}
		kept = append(kept, c)
	}
	l.rows, l.compacted = kept, rev
}

// newTestHub starts a hub over a memLog at revision 1, stopped at cleanup.
func newTestHub(t testing.TB, tune func(*hubConfig)) (*watchHub, *memLog) {
	t.Helper()
	l := newMemLog(1)
	cfg := hubConfig{history: l.history, compacted: l.compactedRev, startRev: 1}
	if tune != nil {
		tune(&cfg)
	}
	l.hub = newWatchHub(cfg)
	t.Cleanup(l.hub.close)
	return l.hub, l
}

const recvTimeout = 10 * time.Second

func recv(t testing.TB, ws *WatchStream) *pb.WatchResponse {
	t.Helper()
	select {
	case r, ok := <-ws.Responses():
		if !ok {
			t.Fatal("responses closed")
		}
		return r
	case <-time.After(recvTimeout):
		t.Fatal("no response")
	}
	return nil
}

func expectNone(t testing.TB, ws *WatchStream, d time.Duration) {
	t.Helper()
	select {
	case r, ok := <-ws.Responses():
		if ok {
			t.Fatalf("unexpected response %v", r)
		}
	case <-time.After(d):
	}
}

// watchID creates a watcher and returns the ID of its created answer.
func watchID(t testing.TB, ws *WatchStream, req *pb.WatchCreateRequest) int64 {
	t.Helper()
	ws.Watch(req)
	r := recv(t, ws)
	if !r.Created || r.Canceled {
		t.Fatalf("want created, got %v", r)
	}
	return r.WatchId
}

// evKey renders an event compactly for comparisons.
func evKey(ev *mvccpb.Event) string {
	return fmt.Sprintf("%d:%s:%s:%s", ev.Kv.ModRevision, ev.Type, ev.Kv.Key, ev.Kv.Value)
}

// expected lists, in order, the events a watcher should receive from the
// log's rows from revision from on.
func (l *memLog) expected(w *watcher, from int64) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, c := range l.rows {
		if changeRev(c) >= from && w.wants(c) {
			out = append(out, evKey(w.event(c, l.compacted)))
		}
	}
	return out
}
