package mvcc

import (
	"slices"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

func TestWatchCreateAndCancel(t *testing.T) {
	h, l := newTestHub(t, nil)
	ws := h.newStream()
	defer ws.Close()
	l.write(put("a", "1")) // revision 2

	ws.Watch(&pb.WatchCreateRequest{Key: []byte("a")})
	r := recv(t, ws)
	if r.WatchId != 0 || !r.Created || r.Canceled || r.Header.Revision != 2 {
		t.Fatalf("first auto ID: %v", r)
	}
	if got := watchID(t, ws, &pb.WatchCreateRequest{Key: []byte("a"), WatchId: 1}); got != 1 {
		t.Fatalf("requested ID: got %d", got)
	}
	// Auto IDs skip the ones taken by request, as etcd's nextID loop does.
	if got := watchID(t, ws, &pb.WatchCreateRequest{Key: []byte("a")}); got != 2 {
		t.Fatalf("second auto ID: got %d, want 2", got)
	}

	rejects := []struct {
		name   string
		req    *pb.WatchCreateRequest
		reason string
	}{
		{"duplicate", &pb.WatchCreateRequest{Key: []byte("a"), WatchId: 1}, reasonDuplicateID},
		{"empty range", &pb.WatchCreateRequest{Key: []byte("b"), RangeEnd: []byte("a")}, reasonEmptyRange},
		{"key equals end", &pb.WatchCreateRequest{Key: []byte("b"), RangeEnd: []byte("b")}, reasonEmptyRange},
		{"negative revision", &pb.WatchCreateRequest{Key: []byte("a"), StartRevision: -1}, reasonNegativeRev},
	}
	for _, tc := range rejects {
		ws.Watch(tc.req)
		r := recv(t, ws)
		if r.WatchId != -1 || !r.Created || !r.Canceled || r.CancelReason != tc.reason || r.Header.Revision != 2 {
			t.Fatalf("%s: got %v", tc.name, r)
		}
	}

	ws.Cancel(1)
	r = recv(t, ws)
	if r.WatchId != 1 || !r.Canceled || r.Created || r.Header.Revision != 2 {
		t.Fatalf("cancel: %v", r)
	}
	ws.Cancel(1)  // already gone: etcd answers nothing
	ws.Cancel(42) // never existed
	expectNone(t, ws, 50*time.Millisecond)

	// The canceled watcher gets nothing more; the others do.
	l.write(put("a", "2"))
	got := map[int64]bool{}
	for range 2 {
		r := recv(t, ws)
		got[r.WatchId] = true
		if len(r.Events) != 1 || r.Header.Revision != 3 {
			t.Fatalf("event response: %v", r)
		}
	}
	if !got[0] || !got[2] || got[1] {
		t.Fatalf("events went to %v", got)
	}
	// A canceled ID may be requested again.
	if id := watchID(t, ws, &pb.WatchCreateRequest{Key: []byte("a"), WatchId: 1}); id != 1 {
		t.Fatalf("reused ID: %d", id)
	}
}

func TestWatchRangesAndFilters(t *testing.T) {
	h, l := newTestHub(t, nil)
	ws := h.newStream()
	defer ws.Close()
	reqs := map[string]*pb.WatchCreateRequest{
		"key":      {Key: []byte("b")},
		"prefix":   {Key: []byte("b"), RangeEnd: []byte("c")},
		"fromKey":  {Key: []byte("b"), RangeEnd: []byte{0}},
		"all":      {Key: nil, RangeEnd: []byte{0}},
		"noPut":    {Key: []byte("a"), RangeEnd: []byte{0}, Filters: []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NOPUT}},
		"noDelete": {Key: []byte("a"), RangeEnd: []byte{0}, Filters: []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NODELETE}},
		"nothing": {Key: []byte("a"), RangeEnd: []byte{0}, Filters: []pb.WatchCreateRequest_FilterType{
			pb.WatchCreateRequest_NOPUT, pb.WatchCreateRequest_NODELETE}},
	}
	names := map[int64]string{}
	for name, req := range reqs {
		names[watchID(t, ws, req)] = name
	}

	l.write(put("a", "1"), put("b", "1"), put("b1", "1"), put("c", "1")) // 2
	l.write(del("b"), del("c"))                                          // 3
	l.write(put("\x00", "z"))                                            // 4

	want := map[string][]string{
		"key":      {"2:PUT:b:1", "3:DELETE:b:"},
		"prefix":   {"2:PUT:b:1", "2:PUT:b1:1", "3:DELETE:b:"},
		"fromKey":  {"2:PUT:b:1", "2:PUT:b1:1", "2:PUT:c:1", "3:DELETE:b:", "3:DELETE:c:"},
		"all":      {"2:PUT:a:1", "2:PUT:b:1", "2:PUT:b1:1", "2:PUT:c:1", "3:DELETE:b:", "3:DELETE:c:", "4:PUT:\x00:z"},
		"noPut":    {"3:DELETE:b:", "3:DELETE:c:"},
		"noDelete": {"2:PUT:a:1", "2:PUT:b:1", "2:PUT:b1:1", "2:PUT:c:1"},
	}
	got := map[string][]string{}
	count := 0
	for _, evs := range want {
		count += len(evs)
	}
	for n := 0; n < count; {
		r := recv(t, ws)
		for _, ev := range r.Events {
			if ev.Kv.ModRevision != r.Header.Revision {
				t.Fatalf("live event %v under header %d", ev, r.Header.Revision)
			}
			if ev.Type == mvccpb.Event_DELETE && (ev.Kv.Version != 0 || len(ev.Kv.Value) != 0) {
				t.Fatalf("delete event carries more than key and revision: %v", ev)
			}
			got[names[r.WatchId]] = append(got[names[r.WatchId]], evKey(ev))
			n++
		}
	}
	expectNone(t, ws, 50*time.Millisecond)
	for name, evs := range want {
		if !slices.Equal(got[name], evs) {
			t.Errorf("%s: got %q, want %q", name, got[name], evs)
		}
	}
	if len(got["nothing"]) != 0 {
		t.Errorf("filtered watcher got %q", got["nothing"])
	}
}

func TestWatchPrevKV(t *testing.T) {
	h, l := newTestHub(t, nil)
	l.write(put("k", "old"))
	for _, fromPast := range []bool{false, true} {
		ws := h.newStream()
		start := int64(0)
		if fromPast {
			start = 2
		}
		ws.Watch(&pb.WatchCreateRequest{Key: []byte("k"), PrevKv: true, StartRevision: start})
		ws.Watch(&pb.WatchCreateRequest{Key: []byte("k"), StartRevision: start})
		const with = 0
		if !fromPast {
			l.write(put("k", "new"))
			l.write(del("k"))
		}
		prevs := map[int64][]string{}
		for len(prevs[0])+len(prevs[1]) < 4 {
			r := recv(t, ws)
			for _, ev := range r.Events {
				if ev.Kv.ModRevision < 3 {
					continue
				}
				p := "-"
				if ev.PrevKv != nil {
					p = string(ev.PrevKv.Value)
				}
				prevs[r.WatchId] = append(prevs[r.WatchId], p)
			}
		}
		if got := prevs[with]; !slices.Equal(got, []string{"old", "new"}) {
			t.Errorf("fromPast=%v prev_kv watcher: %q", fromPast, got)
		}
		if got := prevs[1-with]; !slices.Equal(got, []string{"-", "-"}) {
			t.Errorf("fromPast=%v plain watcher: %q", fromPast, got)
		}
		ws.Close()
	}
}

func TestWatchFragmentFlag(t *testing.T) {
	h, l := newTestHub(t, nil)
	ws := h.newStream()
	defer ws.Close()
	frag := watchID(t, ws, &pb.WatchCreateRequest{Key: []byte("k"), Fragment: true})
	plain := watchID(t, ws, &pb.WatchCreateRequest{Key: []byte("k")})
	l.write(put("k", "v"))
	for range 2 {
		r := recv(t, ws)
		if got, want := ws.Fragment(r.WatchId), r.WatchId == frag; got != want {
			t.Fatalf("Fragment(%d) = %v, want %v", r.WatchId, got, want)
		}
	}
	ws.Cancel(frag)
	recv(t, ws)
	// The flag goes once the cancel answer has been taken; the next receive
	// proves it.
	ws.Cancel(plain)
	recv(t, ws)
	if ws.Fragment(frag) {
		t.Fatal("fragment flag survived cancel")
	}
}

func TestWatchStreamClose(t *testing.T) {
	h, l := newTestHub(t, nil)
	ws := h.newStream()
	watchID(t, ws, &pb.WatchCreateRequest{Key: []byte("k")})
	l.write(put("k", "v"))
	ws.Close()
	ws.Close() // twice is harmless
	for range ws.Responses() {
		// a response queued before Close may or may not be delivered
	}
	ws.Watch(&pb.WatchCreateRequest{Key: []byte("k")})
	ws.Cancel(0)
	ws.RequestProgress()
	l.write(put("k", "v2"))
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.streams) != 0 || len(h.unsynced) != 0 || len(h.synced.keys) != 0 {
		t.Fatalf("closed stream left state: streams %d unsynced %d keys %d",
			len(h.streams), len(h.unsynced), len(h.synced.keys))
	}
}
