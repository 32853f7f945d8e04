package storetest

import (
	"slices"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"
)

// watchTimeout bounds how long the watchers of one check may take to
// deliver their history.
const watchTimeout = 30 * time.Second

var watchSelectors = [5]int{selKey: 3, selPrefix: 3, selInterval: 2, selFromKey: 2, selAll: 2}

// checkWatches opens watchers from random revisions the Store still holds
// and compares what they receive up to the current revision with the
// model's history; watchers from compacted revisions must be refused.
func (h *harness) checkWatches(thorough bool) {
	h.t.Helper()
	n := 3
	if thorough {
		n = 10
	}
	if h.m.current > h.m.compacted {
		h.watchHistory(n)
	}
	if h.m.compacted > 1 {
		h.watchCompacted(1 + n/3)
	}
}

func (h *harness) watchRequest(id, start int64) *pb.WatchCreateRequest {
	key, end := h.g.selector(watchSelectors)
	for emptyRange(key, end) {
		key, end = h.g.selector(watchSelectors) // etcd refuses to watch one
	}
	req := &pb.WatchCreateRequest{WatchId: id, Key: key, RangeEnd: end, StartRevision: start, PrevKv: h.g.chance(0.5)}
	switch h.rng.IntN(8) {
	case 0:
		req.Filters = []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NOPUT}
	case 1:
		req.Filters = []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NODELETE}
	}
	return req
}

// watchHistory opens n watchers on one stream, each from a revision in
// (compacted, current], and reads until a progress notification: the
// Store sends one only once every watcher of the stream is synced, behind
// every event before it, so what came before it is everything.
func (h *harness) watchHistory(n int) {
	h.t.Helper()
	ws := h.s.NewWatchStream()
	defer ws.Close()
	reqs := map[int64]*pb.WatchCreateRequest{}
	for i := range n {
		id := int64(i + 1)
		start := h.m.compacted + 1 + h.rng.Int64N(h.m.current-h.m.compacted)
		reqs[id] = h.watchRequest(id, start)
		ws.Watch(reqs[id])
	}
	got := map[int64][]*mvccpb.Event{}
	created := map[int64]bool{}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(watchTimeout)
	for done := false; !done; {
		select {
		case resp, ok := <-ws.Responses():
			switch {
			case !ok:
				h.fatalf("watch stream closed (%v); got so far %v", ws.Err(), got)
			case resp.Created:
				if reqs[resp.WatchId] == nil || resp.Canceled || resp.GetHeader().GetRevision() != h.m.current {
					h.fatalf("watch create answered %s; want created, watch ID among 1..%d, revision %d", text(resp), n, h.m.current)
				}
				created[resp.WatchId] = true
			case resp.Canceled:
				h.fatalf("watch %s canceled: %s", text(reqs[resp.WatchId]), text(resp))
			case resp.WatchId == -1 && len(resp.Events) == 0:
				done = len(created) == n && resp.GetHeader().GetRevision() >= h.m.current
			default:
				if reqs[resp.WatchId] == nil {
					h.fatalf("watch response for unknown watch: %s", text(resp))
				}
				got[resp.WatchId] = append(got[resp.WatchId], resp.Events...)
			}
		case <-tick.C:
			ws.RequestProgress()
		case <-deadline:
			h.fatalf("watchers not synced within %v; created %v, events so far %v", watchTimeout, created, got)
		}
	}
	for id := int64(1); id <= int64(n); id++ {
		want := h.m.events(reqs[id])
		h.stats.events += len(want)
		if !slices.EqualFunc(want, got[id], func(a, b *mvccpb.Event) bool { return proto.Equal(a, b) }) {
			h.fatalf("watch %s: events differ from the model's (etcd's) (-model +store):\n%s", text(reqs[id]), diff(want, got[id]))
		}
	}
}

// watchCompacted opens watchers from compacted revisions: etcd creates
// each, then cancels it with the compacted revision (and the zero header
// revision of its internal answer).
func (h *harness) watchCompacted(n int) {
	h.t.Helper()
	ws := h.s.NewWatchStream()
	defer ws.Close()
	want := map[int64][]*pb.WatchResponse{}
	for i := range n {
		id := int64(i + 1)
		req := h.watchRequest(id, 1+h.rng.Int64N(h.m.compacted-1))
		ws.Watch(req)
		want[id] = []*pb.WatchResponse{
			{Header: hdr(h.m.current), WatchId: id, Created: true},
			{Header: hdr(0), WatchId: id, Canceled: true, CompactRevision: h.m.compacted},
		}
	}
	got := map[int64][]*pb.WatchResponse{}
	deadline := time.After(watchTimeout)
	for received := 0; received < 2*n; received++ {
		select {
		case resp, ok := <-ws.Responses():
			if !ok {
				h.fatalf("watch stream closed (%v)", ws.Err())
			}
			got[resp.WatchId] = append(got[resp.WatchId], resp)
		case <-deadline:
			h.fatalf("watchers from compacted revisions: within %v got %v; want %v", watchTimeout, got, want)
		}
	}
	if d := diff(want, got); d != "" {
		h.fatalf("watchers from compacted revisions (below %d): answers differ from etcd's (-etcd +store):\n%s", h.m.compacted, d)
	}
}

// emptyRange reports whether [key, end) holds no key at all; a single
// key (no end) and a from-key range ("\x00") never do.
func emptyRange(key, end []byte) bool {
	return len(end) > 0 && !(len(end) == 1 && end[0] == 0) && string(end) <= string(key)
}
