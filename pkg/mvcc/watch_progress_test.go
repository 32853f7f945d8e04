package mvcc

import (
	"fmt"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

func TestWatchRequestProgress(t *testing.T) {
	h, l := newTestHub(t, nil)
	ws := h.newStream()
	defer ws.Close()

	// No watchers: etcd sends nothing.
	ws.RequestProgress()
	expectNone(t, ws, 30*time.Millisecond)

	id := watchID(t, ws, &pb.WatchCreateRequest{Key: []byte("k")})
	l.write(put("k", "v"))
	l.write(put("other", "v"))
	ws.RequestProgress()
	if r := recv(t, ws); r.WatchId != id || len(r.Events) != 1 {
		t.Fatalf("event first: %v", r)
	}
	if r := recv(t, ws); r.WatchId != -1 || r.Header.Revision != 3 || len(r.Events) != 0 || r.Canceled || r.Created {
		t.Fatalf("progress: %v", r)
	}
}

func TestWatchRequestProgressWaitsForUnsynced(t *testing.T) {
	h, l := newTestHub(t, func(c *hubConfig) { c.ringRevisions = 1 })
	ws := h.newStream()
	defer ws.Close()
	for i := range 4 {
		l.write(put("k", fmt.Sprint(i))) // revisions 2..5; the ring keeps 5
	}
	// A watcher from revision 2 is caught up from the log, and the read
	// waits on the gate, so it is unsynced when progress is requested
	// whatever the goroutines' pace. (Falling behind a full queue is no
	// such guarantee: a slow stream goroutine lets the catch-up fold
	// several revisions into one response and sync before the request.)
	gate := make(chan struct{})
	l.mu.Lock()
	l.gate = gate
	l.mu.Unlock()
	watchID(t, ws, &pb.WatchCreateRequest{Key: []byte("k"), StartRevision: 2})
	ws.RequestProgress() // not all synced: dropped, as etcd 3.7 does
	close(gate)
	collect(t, ws, 0, 4)
	expectNone(t, ws, 50*time.Millisecond)
}

// TestWatchProgressNeverOvertakesEvents is kube-apiserver's requirement: a
// progress notification at R comes after every event up to R. Tiny queues
// keep watchers falling behind and catching up while progress is requested.
func TestWatchProgressNeverOvertakesEvents(t *testing.T) {
	h, l := newTestHub(t, func(c *hubConfig) { c.queueLen = 3; c.ringRevisions = 4; c.historyBatch = 5 })
	ws := h.newStream()
	defer ws.Close()
	for i := range 3 {
		watchID(t, ws, &pb.WatchCreateRequest{Key: []byte(fmt.Sprintf("k%d", i))})
	}
	const writes = 1500
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := range writes {
			l.write(put(fmt.Sprintf("k%d", i%3), fmt.Sprint(i)))
			if i%50 == 0 {
				time.Sleep(2 * time.Millisecond) // let the watchers sync now and then
			}
		}
	}()
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				ws.RequestProgress()
				time.Sleep(50 * time.Microsecond)
			}
		}
	}()

	lastEvent := map[int64]int64{} // per watcher
	progresses := 0
	for seen := 0; seen < writes; {
		r := recv(t, ws)
		if r.WatchId == -1 {
			progresses++
			for id := range int64(3) {
				// Every event of watcher id up to the progress revision is in.
				if want := expectedLast(id, r.Header.Revision); lastEvent[id] != want {
					t.Fatalf("progress at %d before watcher %d's events up to %d (has %d)",
						r.Header.Revision, id, want, lastEvent[id])
				}
			}
			continue
		}
		for _, ev := range r.Events {
			if ev.Kv.ModRevision <= lastEvent[r.WatchId] {
				t.Fatalf("watcher %d: revision %d after %d", r.WatchId, ev.Kv.ModRevision, lastEvent[r.WatchId])
			}
			lastEvent[r.WatchId] = ev.Kv.ModRevision
			seen++
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d progress notifications checked, %d log reads", progresses, l.reads.Load())
	if progresses == 0 {
		t.Fatal("no progress notification to check")
	}
}

// expectedLast is the newest revision <= rev written to k<id> by the test
// above (write i is revision i+2, to key k<i%3>).
func expectedLast(id, rev int64) int64 {
	for r := rev; r >= 2; r-- {
		if (r-2)%3 == id {
			return r
		}
	}
	return 0
}

func TestWatchProgressNotifyPeriodic(t *testing.T) {
	h, l := newTestHub(t, func(c *hubConfig) { c.progressInterval = 40 * time.Millisecond })
	ws := h.newStream()
	defer ws.Close()
	id := watchID(t, ws, &pb.WatchCreateRequest{Key: []byte("k"), ProgressNotify: true})
	watchID(t, ws, &pb.WatchCreateRequest{Key: []byte("other")})
	l.write(put("x", "1"))
	for range 3 {
		r := recv(t, ws)
		if r.WatchId != id || len(r.Events) != 0 || r.Header.Revision != 2 {
			t.Fatalf("progress notify: %v", r)
		}
	}
}

func TestWatchProgressNotifySkipsAfterEvents(t *testing.T) {
	h, l := newTestHub(t, func(c *hubConfig) { c.progressInterval = time.Hour })
	ws := h.newStream()
	defer ws.Close()
	id := watchID(t, ws, &pb.WatchCreateRequest{Key: []byte("k"), ProgressNotify: true})
	future := watchID(t, ws, &pb.WatchCreateRequest{Key: []byte("f"), ProgressNotify: true, StartRevision: 100})

	h.progressTick(ws)
	if r := recv(t, ws); r.WatchId != id || r.Header.Revision != 1 {
		t.Fatalf("first tick: %v", r)
	}
	l.write(put("k", "v"))
	if r := recv(t, ws); len(r.Events) != 1 {
		t.Fatalf("event: %v", r)
	}
	h.progressTick(ws) // an event went out since the last tick: skipped
	expectNone(t, ws, 30*time.Millisecond)
	h.progressTick(ws)
	if r := recv(t, ws); r.WatchId != id || r.Header.Revision != 2 || len(r.Events) != 0 {
		t.Fatalf("third tick: %v", r)
	}
	// The future watcher never got one: it has not reached its start revision.
	_ = future
	expectNone(t, ws, 30*time.Millisecond)
}
