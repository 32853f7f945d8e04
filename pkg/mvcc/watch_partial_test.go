package mvcc

import (
	"fmt"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// writePartial commits ops to the log, whose rows keep every previous
// value, and publishes them as the evaluator does when no watcher wanted
// prev_kv: the previous rows without their values, marked PartialPrev.
func (l *memLog) writePartial(ops ...op) int64 {
	rev, changes := l.commit(ops...)
	published := make([]Change, len(changes))
	for i, c := range changes {
		published[i] = c
		if c.PrevKV != nil {
			p := &mvccpb.KeyValue{Key: c.PrevKV.Key, CreateRevision: c.PrevKV.CreateRevision,
				ModRevision: c.PrevKV.ModRevision, Version: c.PrevKV.Version, Lease: c.PrevKV.Lease}
			published[i].PrevKV, published[i].PartialPrev = p, true
		}
	}
	if len(published) > 0 {
		l.hub.publish(rev, published)
	}
	return rev
}

// prevOf renders an event's prev_kv for comparisons.
func prevOf(ev *mvccpb.Event) string {
	if ev.PrevKv == nil {
		return "none"
	}
	return fmt.Sprintf("%s@%d=%s", ev.PrevKv.Key, ev.PrevKv.ModRevision, ev.PrevKv.Value)
}

// TestWatchPartialPrevFromTheLog: revisions published without previous
// values (no prev_kv watcher when they were written) reach a prev_kv
// watcher, synced or catching up from the ring, only through the log, so
// every prev_kv it gets has its value; a watcher without prev_kv is served
// from memory as before.
func TestWatchPartialPrevFromTheLog(t *testing.T) {
	for _, ring := range []int{1, 8, 0} {
		t.Run(fmt.Sprintf("ring%d", ring), func(t *testing.T) {
			h, l := newTestHub(t, func(c *hubConfig) { c.ringRevisions = ring; c.historyBatch = 5 })
			for i := range 20 {
				l.write(put(fmt.Sprintf("k%d", i%4), fmt.Sprint("full-", i)))
			}
			for i := range 20 {
				l.writePartial(put(fmt.Sprintf("k%d", i%4), fmt.Sprint("partial-", i)))
			}
			ws := h.newStream()
			defer ws.Close()
			// From history: the ring holds the partial revisions.
			const fromHistory, plain, live = 1, 2, 3
			ws.Watch(&pb.WatchCreateRequest{WatchId: fromHistory, Key: []byte("k"), RangeEnd: []byte("l"), StartRevision: 2, PrevKv: true})
			ws.Watch(&pb.WatchCreateRequest{WatchId: plain, Key: []byte("k"), RangeEnd: []byte("l"), StartRevision: 2})
			// Synced, then met by partial revisions published after it.
			liveFrom := l.rev + 1
			ws.Watch(&pb.WatchCreateRequest{WatchId: live, Key: []byte("k"), RangeEnd: []byte("l"), PrevKv: true})
			for i := range 10 {
				l.writePartial(put(fmt.Sprintf("k%d", i%4), fmt.Sprint("late-", i)), del("k3"))
			}
			for i := range 5 {
				l.write(put(fmt.Sprintf("k%d", i%4), fmt.Sprint("after-", i)))
			}

			want := map[int64][]string{}
			for id, w := range map[int64]*watcher{
				fromHistory: {key: []byte("k"), end: []byte("l"), prevKV: true},
				plain:       {key: []byte("k"), end: []byte("l")},
				live:        {key: []byte("k"), end: []byte("l"), prevKV: true},
			} {
				from := int64(2)
				if id == live {
					from = liveFrom
				}
				l.mu.Lock()
				// etcd's prev_kv is the key at the revision before the event.
				for _, c := range prevBeforeRevision(l.rows) {
					if changeRev(c) >= from && w.wants(c) {
						ev := w.event(c, l.compacted)
						want[id] = append(want[id], evKey(ev)+" prev "+prevOf(ev))
					}
				}
				l.mu.Unlock()
			}
			got := map[int64][]string{}
			for len(got[fromHistory]) < len(want[fromHistory]) || len(got[plain]) < len(want[plain]) || len(got[live]) < len(want[live]) {
				r := recv(t, ws)
				if r.Canceled {
					t.Fatalf("watch %d canceled: %v", r.WatchId, r)
				}
				for _, ev := range r.Events {
					got[r.WatchId] = append(got[r.WatchId], evKey(ev)+" prev "+prevOf(ev))
					if r.WatchId != plain && ev.PrevKv != nil && ev.PrevKv.Value == nil {
						t.Fatalf("watch %d: event %s has a prev_kv without its value", r.WatchId, evKey(ev))
					}
				}
			}
			for id, w := range want {
				if fmt.Sprint(got[id]) != fmt.Sprint(w) {
					t.Errorf("watch %d:\n got %v\nwant %v", id, got[id], w)
				}
			}
			expectNone(t, ws, 50*time.Millisecond)
		})
	}
}

// TestWatchHubCountsPrevWatchers: the writer reads whole previous rows
// while a prev_kv watcher exists, in any state, and stops once the last
// one is gone.
func TestWatchHubCountsPrevWatchers(t *testing.T) {
	h, l := newTestHub(t, nil)
	l.write(put("a", "1"))
	ws := h.newStream()
	if h.wantsPrev() {
		t.Fatal("wantsPrev with no watcher")
	}
	watchID(t, ws, &pb.WatchCreateRequest{Key: []byte("a")})
	if h.wantsPrev() {
		t.Fatal("wantsPrev with a watcher without prev_kv")
	}
	synced := watchID(t, ws, &pb.WatchCreateRequest{Key: []byte("a"), PrevKv: true})
	watchID(t, ws, &pb.WatchCreateRequest{Key: []byte("a"), PrevKv: true, StartRevision: 1})
	if !h.wantsPrev() {
		t.Fatal("no wantsPrev with prev_kv watchers")
	}
	ws.Cancel(synced)
	if !h.wantsPrev() {
		t.Fatal("no wantsPrev with one prev_kv watcher left")
	}
	ws.Close()
	if h.wantsPrev() || h.prevWatchers.Load() != 0 {
		t.Fatalf("wantsPrev after the stream closed (count %d)", h.prevWatchers.Load())
	}
}
