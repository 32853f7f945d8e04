package mvcc

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// streamRecord is what a reader saw on one stream.
type streamRecord struct {
	mu         sync.Mutex
	watchers   map[int64]*watcher // by ID, from the created answers
	from       map[int64]int64    // first revision each watcher should see
	events     map[int64][]string
	lastRev    map[int64]int64
	progresses int
}

// TestWatchManyWatchers runs 100 watchers of every shape on 10 streams, some
// read slowly, created while revisions are published and progress is
// requested, and checks that each got exactly its events in order, each
// revision whole in one response, and that no progress overtook an event.
func TestWatchManyWatchers(t *testing.T) {
	h, l := newTestHub(t, func(c *hubConfig) { c.queueLen = 8; c.ringRevisions = 64; c.historyBatch = 50 })
	const (
		streams   = 10
		perStream = 10
		revisions = 600
	)
	keys := func(r *rand.Rand) string { return fmt.Sprintf("k%02d", r.IntN(20)) }

	var pubWG sync.WaitGroup
	pubWG.Add(1)
	go func() {
		defer pubWG.Done()
		r := rand.New(rand.NewPCG(1, 2))
		for range revisions {
			var ops []op
			seen := map[string]bool{}
			for range 1 + r.IntN(4) {
				k := keys(r)
				if seen[k] {
					continue
				}
				seen[k] = true
				if r.IntN(4) == 0 {
					ops = append(ops, del(k))
				} else {
					ops = append(ops, put(k, fmt.Sprint(r.IntN(1000))))
				}
			}
			l.write(ops...)
			if r.IntN(20) == 0 {
				time.Sleep(time.Millisecond)
			}
		}
	}()

	records := make([]*streamRecord, streams)
	wss := make([]*WatchStream, streams)
	var clientWG, readerWG sync.WaitGroup
	for s := range streams {
		ws := h.newStream()
		wss[s] = ws
		rec := &streamRecord{watchers: map[int64]*watcher{}, from: map[int64]int64{},
			events: map[int64][]string{}, lastRev: map[int64]int64{}}
		records[s] = rec
		reqs := make([]*pb.WatchCreateRequest, perStream)
		r := rand.New(rand.NewPCG(uint64(s), 7))
		for i := range reqs {
			req := &pb.WatchCreateRequest{Key: []byte(keys(r)), PrevKv: r.IntN(2) == 0}
			switch r.IntN(3) {
			case 1:
				req.Key, req.RangeEnd = []byte("k0"), []byte("k1")
			case 2:
				req.RangeEnd = []byte{0}
			}
			switch r.IntN(4) {
			case 1:
				req.Filters = []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NOPUT}
			case 2:
				req.Filters = []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NODELETE}
			}
			// start revision: now, past (from 1), or ahead; resolved at creation
			req.StartRevision = int64(r.IntN(3))
			reqs[i] = req
		}
		slow := s%3 == 0
		readerWG.Add(1)
		go func() {
			defer readerWG.Done()
			readStream(t, ws, rec, reqs, l, slow)
		}()
		clientWG.Add(1)
		go func() {
			defer clientWG.Done()
			r := rand.New(rand.NewPCG(uint64(s), 9))
			for _, req := range reqs {
				time.Sleep(time.Duration(r.IntN(3000)) * time.Microsecond)
				h.mu.Lock()
				cur := h.rev
				h.mu.Unlock()
				switch req.StartRevision {
				case 1:
					req.StartRevision = 1 + r.Int64N(cur)
				case 2:
					req.StartRevision = cur + 1 + r.Int64N(50)
				}
				ws.Watch(req)
				ws.RequestProgress()
			}
		}()
	}
	clientWG.Wait()
	pubWG.Wait()

	// Wait until every watcher has its expected events, then compare.
	deadline := time.Now().Add(20 * time.Second)
	for s, rec := range records {
		for id := range int64(perStream) {
			for {
				rec.mu.Lock()
				w, from, got := rec.watchers[id], rec.from[id], slices.Clone(rec.events[id])
				rec.mu.Unlock()
				var want []string
				if w != nil {
					want = l.expected(w, from)
				}
				if w != nil && len(got) >= len(want) {
					if !slices.Equal(got, want) {
						t.Fatalf("stream %d watcher %d: got %d events, want %d\n got %q\nwant %q",
							s, id, len(got), len(want), got, want)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("stream %d watcher %d: %d of %d events", s, id, len(got), len(want))
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
	for _, ws := range wss {
		ws.Close()
	}
	readerWG.Wait()
	progresses := 0
	for _, rec := range records {
		progresses += rec.progresses
	}
	t.Logf("%d progress notifications checked, %d log reads", progresses, l.reads.Load())
}

// readStream records a stream's responses until it closes, checking order,
// atomicity and progress notifications as they come.
func readStream(t *testing.T, ws *WatchStream, rec *streamRecord, reqs []*pb.WatchCreateRequest, l *memLog, slow bool) {
	for r := range ws.Responses() {
		if slow {
			time.Sleep(200 * time.Microsecond)
		}
		rec.mu.Lock()
		switch {
		case r.Created:
			req := reqs[r.WatchId]
			w := &watcher{key: req.Key, end: req.RangeEnd, prevKV: req.PrevKv, startRev: req.StartRevision}
			if len(w.end) == 1 && w.end[0] == 0 {
				w.end = []byte{}
			} else if len(w.end) == 0 {
				w.end = nil
			}
			for _, f := range req.Filters {
				w.noPut = w.noPut || f == pb.WatchCreateRequest_NOPUT
				w.noDelete = w.noDelete || f == pb.WatchCreateRequest_NODELETE
			}
			rec.watchers[r.WatchId] = w
			rec.from[r.WatchId] = req.StartRevision
			if req.StartRevision == 0 {
				rec.from[r.WatchId] = r.Header.Revision + 1
			}
		case r.WatchId == -1:
			rec.progresses++
			for id, w := range rec.watchers {
				want := 0
				for _, e := range l.expected(w, rec.from[id]) {
					var rev int64
					fmt.Sscanf(e, "%d:", &rev)
					if rev <= r.Header.Revision {
						want++
					}
				}
				got := 0
				for _, e := range rec.events[id] {
					var rev int64
					fmt.Sscanf(e, "%d:", &rev)
					if rev <= r.Header.Revision {
						got++
					}
				}
				if got != want {
					t.Errorf("progress %d overtook watcher %d: %d of %d events", r.Header.Revision, id, got, want)
				}
			}
		default:
			if len(r.Events) == 0 || r.Canceled {
				t.Errorf("unexpected response %v", r)
				break
			}
			if first := r.Events[0].Kv.ModRevision; first <= rec.lastRev[r.WatchId] {
				t.Errorf("watcher %d: revision %d after %d", r.WatchId, first, rec.lastRev[r.WatchId])
			}
			for _, ev := range r.Events {
				rec.events[r.WatchId] = append(rec.events[r.WatchId], evKey(ev))
				rec.lastRev[r.WatchId] = ev.Kv.ModRevision
			}
		}
		rec.mu.Unlock()
	}
}

func TestWatchCloseStopsGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	l := newMemLog(1)
	h := newWatchHub(hubConfig{history: l.history, compacted: l.compactedRev, startRev: 1,
		queueLen: 2, ringRevisions: 1})
	l.hub = h
	var wss []*WatchStream
	for i := range 20 {
		ws := h.newStream()
		wss = append(wss, ws)
		ws.Watch(&pb.WatchCreateRequest{Key: []byte("k"), StartRevision: int64(i%2) + 1})
	}
	for i := range 50 {
		l.write(put("k", fmt.Sprint(i)))
	}
	wss[0].Close()
	h.close()
	h.close()
	for _, ws := range wss {
		for range ws.Responses() {
		}
		ws.Close() // after the hub: harmless
	}
	if ws := h.newStream(); ws != nil {
		if _, ok := <-ws.Responses(); ok {
			t.Fatal("stream of a closed hub is open")
		}
	}
	l.write(put("k", "after close"))
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("goroutines: %d before, %d after\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}
