package mvcc

import (
	"bytes"
	"math/rand/v2"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// Cancel reasons of a rejected watch create request, worded as etcd words
// them (mvcc.ErrEmptyWatcherRange, mvcc.ErrWatcherDuplicateID and
// rpctypes.ErrCompacted of etcd 3.7): the client sees this text.
const (
	reasonEmptyRange  = "mvcc: watcher range is empty"
	reasonDuplicateID = "mvcc: duplicate watch ID provided on the WatchStream"
	reasonNegativeRev = "etcdserver: mvcc: required revision has been compacted"
)

// invalidWatchID is clientv3.InvalidWatchID: the ID of answers that belong
// to no watcher (rejected creates, stream-wide progress notifications).
const invalidWatchID = -1

// WatchStream is the watch side of one gRPC Watch stream: many watchers
// sharing one ordered sequence of responses. The gRPC server calls Watch,
// Cancel and RequestProgress from its receive loop and forwards Responses to
// the client as they come, in order; it only fills the header's cluster ID,
// member ID and raft term, and splits oversized event responses of watchers
// for which Fragment is true.
//
// A response and its header belong to the receiver; its events and their
// key-values are shared with other watchers and must not be modified.
type WatchStream struct {
	hub     *watchHub
	batches chan []Delivery // unbuffered; closed when run returns
	stopc   chan struct{}   // closed once, under hub.mu, with closed
	donec   chan struct{}   // closed when run returns
	wake    chan struct{}   // the queue got a response
	room    chan struct{}   // the queue lost a response

	// Responses, for consumers that take one response at a time.
	flatOnce sync.Once
	flat     chan *pb.WatchResponse

	// Guarded by hub.mu.
	watchers map[int64]*watcher
	nextID   int64
	closed   bool

	// qmu guards the queue; lock order: hub.mu before qmu.
	qmu      sync.Mutex
	queue    []queued
	needRoom bool // the sync loop waits for this queue to drain

	fmu       sync.Mutex
	fragments map[int64]bool
}

// newStream opens a stream. On a closed hub the stream is born closed.
func (h *watchHub) newStream() *WatchStream {
	ws := &WatchStream{
		hub:       h,
		batches:   make(chan []Delivery),
		stopc:     make(chan struct{}),
		donec:     make(chan struct{}),
		wake:      make(chan struct{}, 1),
		room:      make(chan struct{}, 1),
		watchers:  make(map[int64]*watcher),
		fragments: make(map[int64]bool),
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || h.failed != nil {
		ws.closed = true
		close(ws.stopc)
		close(ws.batches)
		close(ws.donec)
		return ws
	}
	h.streams[ws] = struct{}{}
	h.wg.Add(1)
	go ws.run(jitter(h.progressInterval))
	return ws
}

// jitter spreads the periodic progress of streams created together over a
// tenth of the interval, as etcd does.
func jitter(d time.Duration) time.Duration {
	if d/10 <= 0 {
		return d
	}
	return d + rand.N(d/10)
}

// Batches delivers the stream's responses in the order the client must
// see them, as many at a time as were waiting, each with its fragment
// choice. It is closed by Close and when the store closes. A stream is read
// through Batches or through Responses, not both.
func (ws *WatchStream) Batches() <-chan []Delivery { return ws.batches }

// Err tells why Batches or Responses closed: nil when the stream or the
// store was closed, ErrHistoryLost (wrapped) when the store stopped serving
// a storage that lost revisions it had published.
func (ws *WatchStream) Err() error {
	ws.hub.mu.Lock()
	defer ws.hub.mu.Unlock()
	return ws.hub.failed
}

// Responses delivers the same responses one at a time; Fragment then
// answers for the response last received.
func (ws *WatchStream) Responses() <-chan *pb.WatchResponse {
	ws.flatOnce.Do(func() {
		ws.flat = make(chan *pb.WatchResponse)
		go ws.flatten()
	})
	return ws.flat
}

// Fragment reports whether the watcher of the response last received from
// Responses asked for fragment. Call it before receiving the next response.
// (Batches carries the choice in each Delivery.)
func (ws *WatchStream) Fragment(id int64) bool {
	ws.fmu.Lock()
	defer ws.fmu.Unlock()
	return ws.fragments[id]
}

// Watch creates a watcher as etcd's server does for a WatchCreateRequest and
// queues its answer: {Created} with the current revision, or, for a request
// etcd rejects, {WatchId: -1, Created, Canceled, CancelReason}. Events of
// the watcher always follow its created answer.
func (ws *WatchStream) Watch(req *pb.WatchCreateRequest) {
	if !ws.waitRoom() {
		return
	}
	key, end := req.Key, req.RangeEnd
	if len(key) == 0 {
		key = []byte{0} // "\x00" is the smallest key, as in etcd
	}
	switch {
	case len(end) == 0:
		end = nil
	case len(end) == 1 && end[0] == 0:
		end = []byte{}
	}

	h := ws.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	if ws.closed {
		return
	}
	reject := func(reason string) {
		ws.enqueueCtrl(queued{resp: &pb.WatchResponse{
			Header: header(h.rev), WatchId: invalidWatchID,
			Created: true, Canceled: true, CancelReason: reason,
		}})
	}
	id := req.WatchId
	switch {
	case req.StartRevision < 0:
		reject(reasonNegativeRev)
		return
	case len(end) > 0 && bytes.Compare(key, end) >= 0:
		reject(reasonEmptyRange)
		return
	case id == 0: // clientv3.AutoWatchID
		for ws.watchers[ws.nextID] != nil {
			ws.nextID++
		}
		id = ws.nextID
		ws.nextID++
	case ws.watchers[id] != nil:
		reject(reasonDuplicateID)
		return
	}

	w := &watcher{
		id: id, stream: ws, key: key, end: end, startRev: req.StartRevision,
		prevKV: req.PrevKv, fragment: req.Fragment, progress: req.ProgressNotify,
		progressDue: true,
	}
	for _, f := range req.Filters {
		switch f {
		case pb.WatchCreateRequest_NOPUT:
			w.noPut = true
		case pb.WatchCreateRequest_NODELETE:
			w.noDelete = true
		}
	}
	ws.watchers[id] = w
	q := queued{resp: &pb.WatchResponse{Header: header(h.rev), WatchId: id, Created: true}}
	if w.fragment {
		q.frag = fragSet
	}
	ws.enqueueCtrl(q)
	h.addWatcherLocked(w)
}

// Reject answers a create request the server refused before it reached
// the stream (etcd's permission check): created and canceled at once with
// reason, in order with everything else the stream sends.
func (ws *WatchStream) Reject(reason string) {
	if !ws.waitRoom() {
		return
	}
	h := ws.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	if ws.closed {
		return
	}
	ws.enqueueCtrl(queued{resp: &pb.WatchResponse{
		Header: header(h.rev), WatchId: invalidWatchID,
		Created: true, Canceled: true, CancelReason: reason,
	}})
}

// Cancel removes watcher id and queues {WatchId: id, Canceled} after every
// response already queued for it. As in etcd, an unknown ID gets no answer,
// and a watcher canceled by compaction still gets one.
func (ws *WatchStream) Cancel(id int64) {
	if !ws.waitRoom() {
		return
	}
	h := ws.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	w := ws.watchers[id]
	if ws.closed || w == nil {
		return
	}
	h.removeWatcherLocked(w)
	delete(ws.watchers, id)
	q := queued{resp: &pb.WatchResponse{Header: header(h.rev), WatchId: id, Canceled: true}}
	if w.fragment {
		q.frag = fragClear
	}
	ws.enqueueCtrl(q)
}

// Close removes every watcher of the stream, drops its queued responses and
// closes Responses. It returns once the stream's goroutine has stopped.
func (ws *WatchStream) Close() {
	ws.hub.mu.Lock()
	ws.hub.closeStreamLocked(ws)
	ws.hub.mu.Unlock()
	<-ws.donec
}
