package mvcc

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// collect receives until the watcher id has n events, checking that its
// responses come in strictly increasing revisions (so no revision is split
// across responses) and that the header is at least the events' revision.
func collect(t testing.TB, ws *WatchStream, id int64, n int) []string {
	t.Helper()
	var got []string
	last := int64(0)
	for len(got) < n {
		r := recv(t, ws)
		if r.WatchId != id || len(r.Events) == 0 {
			t.Fatalf("unexpected response %v", r)
		}
		if first := r.Events[0].Kv.ModRevision; first <= last {
			t.Fatalf("revision %d after %d: out of order or split", first, last)
		}
		for _, ev := range r.Events {
			last = max(last, ev.Kv.ModRevision)
			got = append(got, evKey(ev))
		}
		if r.Header.Revision < last {
			t.Fatalf("header %d below event revision %d", r.Header.Revision, last)
		}
	}
	return got
}

func TestWatchHistoryJoinsLive(t *testing.T) {
	for _, ring := range []int{1, 8, 0} {
		t.Run(fmt.Sprintf("ring%d", ring), func(t *testing.T) {
			h, l := newTestHub(t, func(c *hubConfig) { c.ringRevisions = ring; c.historyBatch = 7 })
			for i := range 100 {
				l.write(put(fmt.Sprintf("k%d", i%5), fmt.Sprint(i)), put("other", "x"))
			}
			ws := h.newStream()
			defer ws.Close()
			id := watchID(t, ws, &pb.WatchCreateRequest{Key: []byte("k"), RangeEnd: []byte("l"), StartRevision: 10, PrevKv: true})
			// Writes go on while the watcher catches up.
			done := make(chan struct{})
			go func() {
				defer close(done)
				for i := 100; i < 300; i++ {
					l.write(put(fmt.Sprintf("k%d", i%5), fmt.Sprint(i)), put("other", "x"))
				}
			}()
			<-done
			w := &watcher{key: []byte("k"), end: []byte("l"), prevKV: true}
			want := l.expected(w, 10)
			if got := collect(t, ws, id, len(want)); !slices.Equal(got, want) {
				t.Fatalf("got %d events, want %d\n got %q\nwant %q", len(got), len(want), got, want)
			}
			expectNone(t, ws, 50*time.Millisecond)
			if ring == 1 && l.reads.Load() == 0 {
				t.Fatal("history never read with a one-revision ring")
			}
		})
	}
}

func TestWatchHistoryPrevKVFromLog(t *testing.T) {
	h, l := newTestHub(t, func(c *hubConfig) { c.ringRevisions = 1 })
	l.write(put("k", "a"))
	l.write(put("k", "b"))
	l.write(del("k"))
	l.write(put("x", "y"))
	ws := h.newStream()
	defer ws.Close()
	id := watchID(t, ws, &pb.WatchCreateRequest{Key: []byte("k"), StartRevision: 2, PrevKv: true})
	r := recv(t, ws)
	var prevs []string
	for _, ev := range r.Events {
		p := "-"
		if ev.PrevKv != nil {
			p = string(ev.PrevKv.Value)
		}
		prevs = append(prevs, p)
	}
	if r.WatchId != id || !slices.Equal(prevs, []string{"-", "a", "b"}) {
		t.Fatalf("prev values %q in %v", prevs, r)
	}
	// A catch-up response carries the current revision, as etcd's do.
	if r.Header.Revision != 5 {
		t.Fatalf("catch-up header %d, want 5", r.Header.Revision)
	}
}

func TestWatchCompactedStart(t *testing.T) {
	h, l := newTestHub(t, func(c *hubConfig) { c.ringRevisions = 1 })
	for i := range 30 {
		l.write(put("k", fmt.Sprint(i)))
	}
	l.compact(20)
	ws := h.newStream()
	defer ws.Close()

	id := watchID(t, ws, &pb.WatchCreateRequest{Key: []byte("k"), StartRevision: 19})
	r := recv(t, ws)
	if r.WatchId != id || !r.Canceled || r.CompactRevision != 20 || len(r.Events) != 0 || r.Header.Revision != 0 {
		t.Fatalf("compacted answer: %v", r)
	}
	// The compacted watcher keeps its ID until canceled, and gets nothing.
	if got := watchID(t, ws, &pb.WatchCreateRequest{Key: []byte("k")}); got != id+1 {
		t.Fatalf("auto ID after compacted watcher: %d", got)
	}
	ws.Cancel(id + 1)
	recv(t, ws)
	ws.Cancel(id)
	if r := recv(t, ws); r.WatchId != id || !r.Canceled || r.CompactRevision != 0 {
		t.Fatalf("cancel of compacted watcher: %v", r)
	}

	// The compacted revision itself is still watchable (etcd: startRev < compactRev).
	id = watchID(t, ws, &pb.WatchCreateRequest{Key: []byte("k"), StartRevision: 20})
	if got := collect(t, ws, id, 12); got[0] != "20:PUT:k:18" || got[11] != "31:PUT:k:29" {
		t.Fatalf("from compacted revision: %q", got)
	}
}

func TestWatchCompactedWhileBehind(t *testing.T) {
	const queueLen = 2
	h, l := newTestHub(t, func(c *hubConfig) { c.ringRevisions = 1; c.queueLen = queueLen })
	gate := make(chan struct{})
	l.gate = gate // the catch-up read waits until the log is compacted
	ws := h.newStream()
	defer ws.Close()
	id := watchID(t, ws, &pb.WatchCreateRequest{Key: []byte("k")})
	for i := range 20 {
		l.write(put("k", fmt.Sprint(i))) // revisions 2..21; the queue holds 2
	}
	l.compact(15)
	close(gate)
	// What was queued before the watcher fell behind comes first, then the
	// compaction answer. Between the hub and recv a stream holds at most
	// three queues' worth: the queue itself, the batch run has popped and
	// waits to hand on, and the batch flatten is handing out. So at least
	// queueLen and at most 3*queueLen events precede the answer, depending
	// on how far the consumer goroutines got before the writes filled it.
	for want := int64(2); ; want++ {
		r := recv(t, ws)
		if r.CompactRevision != 0 {
			if n := want - 2; !r.Canceled || r.WatchId != id || n < queueLen || n > 3*queueLen {
				t.Fatalf("after %d events: %v", want-2, r)
			}
			break
		}
		if len(r.Events) != 1 || r.Events[0].Kv.ModRevision != want {
			t.Fatalf("want revision %d, got %v", want, r)
		}
	}
	expectNone(t, ws, 30*time.Millisecond)
}

func TestWatchFutureStart(t *testing.T) {
	h, l := newTestHub(t, nil)
	ws := h.newStream()
	defer ws.Close()
	id := watchID(t, ws, &pb.WatchCreateRequest{Key: []byte("k"), StartRevision: 5})
	for i := range 6 {
		l.write(put("k", fmt.Sprint(i))) // revisions 2..7
		if i == 1 {
			// Below its start revision the watcher is not "synced" for progress.
			ws.RequestProgress()
			expectNone(t, ws, 30*time.Millisecond)
		}
	}
	if got := collect(t, ws, id, 3); !slices.Equal(got, []string{"5:PUT:k:3", "6:PUT:k:4", "7:PUT:k:5"}) {
		t.Fatalf("got %q", got)
	}
	ws.RequestProgress()
	if r := recv(t, ws); r.WatchId != -1 || r.Header.Revision != 7 {
		t.Fatalf("progress: %v", r)
	}
}

func TestWatchSlowConsumer(t *testing.T) {
	for _, ring := range []int{1, 0} {
		t.Run(fmt.Sprintf("ring%d", ring), func(t *testing.T) {
			h, l := newTestHub(t, func(c *hubConfig) { c.queueLen = 4; c.ringRevisions = ring; c.historyBatch = 16 })
			ws := h.newStream()
			defer ws.Close()
			id := watchID(t, ws, &pb.WatchCreateRequest{Key: []byte("k"), RangeEnd: []byte{0}})
			// Nobody reads: publish must not block.
			start := time.Now()
			for i := range 2000 {
				l.write(put(fmt.Sprintf("k%d", i%7), fmt.Sprint(i)), put(fmt.Sprintf("k%d", (i+1)%7), "b"))
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Fatalf("publishing took %v", d)
			}
			want := l.expected(&watcher{key: []byte("k"), end: []byte{}}, 2)
			if got := collect(t, ws, id, len(want)); !slices.Equal(got, want) {
				t.Fatalf("got %d events, want %d", len(got), len(want))
			}
			// Caught up: the watcher is synced again and progress is answered.
			ws.RequestProgress()
			if r := recv(t, ws); r.WatchId != -1 || r.Header.Revision != 2001 {
				t.Fatalf("progress after catch-up: %v", r)
			}
		})
	}
}

func TestWatchCatchUpBatchesRevisions(t *testing.T) {
	h, l := newTestHub(t, func(c *hubConfig) { c.ringRevisions = 1 })
	for i := range 2500 {
		l.write(put("k", fmt.Sprint(i)))
	}
	ws := h.newStream()
	defer ws.Close()
	id := watchID(t, ws, &pb.WatchCreateRequest{Key: []byte("k"), StartRevision: 2})
	var sizes []int
	for n := 0; n < 2500; {
		r := recv(t, ws)
		if r.WatchId != id || r.Header.Revision != 2501 {
			t.Fatalf("response %d: id %d header %d", len(sizes), r.WatchId, r.Header.Revision)
		}
		sizes = append(sizes, len(r.Events))
		n += len(r.Events)
	}
	if !slices.Equal(sizes, []int{1000, 1000, 500}) {
		t.Fatalf("batch sizes %v", sizes)
	}
}

func TestWatchLargeRevisionDeliveredWhole(t *testing.T) {
	h, l := newTestHub(t, func(c *hubConfig) { c.ringRevisions = 1; c.historyBatch = 3 })
	var ops []op
	for i := range 10 {
		ops = append(ops, put(fmt.Sprintf("k%02d", i), "v"))
	}
	l.write(ops...)
	l.write(put("z", "z"))
	ws := h.newStream()
	defer ws.Close()
	id := watchID(t, ws, &pb.WatchCreateRequest{Key: []byte("k"), RangeEnd: []byte("l"), StartRevision: 2})
	r := recv(t, ws)
	if r.WatchId != id || len(r.Events) != 10 {
		t.Fatalf("got %d events in %v", len(r.Events), r)
	}
}

func TestWatchHistoryErrorsAreRetried(t *testing.T) {
	h, l := newTestHub(t, func(c *hubConfig) { c.ringRevisions = 1 })
	l.write(put("k", "a"))
	l.write(put("k", "b"))
	l.mu.Lock()
	l.failNext = 2
	l.mu.Unlock()
	ws := h.newStream()
	defer ws.Close()
	id := watchID(t, ws, &pb.WatchCreateRequest{Key: []byte("k"), StartRevision: 2})
	if got := collect(t, ws, id, 2); !slices.Equal(got, []string{"2:PUT:k:a", "3:PUT:k:b"}) {
		t.Fatalf("got %q", got)
	}
}

func TestWatchPublishGapReadsLog(t *testing.T) {
	h, l := newTestHub(t, nil)
	ws := h.newStream()
	defer ws.Close()
	id := watchID(t, ws, &pb.WatchCreateRequest{Key: []byte("k")})
	l.commit(put("k", "lost")) // committed but never published
	l.write(put("k", "seen"))
	if got := collect(t, ws, id, 2); !slices.Equal(got, []string{"2:PUT:k:lost", "3:PUT:k:seen"}) {
		t.Fatalf("got %q", got)
	}
}

// After a lost history every stream ends with the error, and a new stream
// is born ended: no watcher waits for revisions the storage no longer holds.
func TestWatchHubFailEndsStreams(t *testing.T) {
	h, l := newTestHub(t, nil)
	ws := h.newStream()
	defer ws.Close()
	watchID(t, ws, &pb.WatchCreateRequest{Key: []byte("k")})
	l.write(put("k", "1"))
	recv(t, ws)
	lost := fmt.Errorf("test: %w", ErrHistoryLost)
	h.fail(lost)
	select {
	case _, ok := <-ws.Responses():
		if ok {
			t.Fatal("a response after the failure")
		}
	case <-time.After(recvTimeout):
		t.Fatal("stream still open after the failure")
	}
	if err := ws.Err(); !errors.Is(err, ErrHistoryLost) {
		t.Fatalf("Err: %v", err)
	}
	l.write(put("k", "2")) // ignored by the failed hub
	late := h.newStream()
	defer late.Close()
	if _, ok := <-late.Batches(); ok || !errors.Is(late.Err(), ErrHistoryLost) {
		t.Fatalf("new stream after the failure: open %v, err %v", ok, late.Err())
	}
}
