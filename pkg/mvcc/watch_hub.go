package mvcc

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// defaultProgressInterval is etcd's --experimental-watch-progress-notify-interval.
const defaultProgressInterval = 10 * time.Minute

type hubConfig struct {
	// history reads committed log rows with fromRev <= rev <= toRev in (rev,
	// sub) order, at most limit rows (limit > 0), from one consistent
	// snapshot, and returns the compacted revision of that same snapshot.
	history func(ctx context.Context, fromRev, toRev int64, limit int, withPrev bool) ([]Change, int64, error)
	// compacted returns the store's current compacted revision. The hub
	// calls it without holding its own lock, so it may take the store's.
	compacted func() int64
	// startRev is the current revision when the store opened.
	startRev int64
	// progressInterval is the period of progress notifications to watchers
	// created with progress_notify (0: etcd's 10 minutes).
	progressInterval time.Duration
	logger           *slog.Logger

	// Tuning; zero takes the default.
	queueLen      int // event responses a stream may hold before its watchers fall behind
	ringRevisions int // recent revisions kept in memory for catch-up
	ringBytes     int
	historyBatch  int // log rows read per catch-up step
}

// watchHub fans committed changes out to watch streams. Synced watchers are
// fed by publish on the writer's goroutine; a watcher that needs revisions
// publish did not give it (past start revision, full stream queue) is
// unsynced and caught up by syncLoop, from the ring of recent revisions or
// from the log, until it joins the live feed again.
type watchHub struct {
	cfg              hubConfig
	log              *slog.Logger
	queueLen         int
	historyBatch     int
	progressInterval time.Duration

	// mu guards everything below and the watcher fields documented as such.
	// Lock order: mu before WatchStream.qmu; the store's locks are never
	// taken while holding mu.
	mu       sync.Mutex
	rev      int64 // last published revision
	ring     *ring
	synced   *watcherGroup
	unsynced map[*watcher]struct{}
	streams  map[*WatchStream]struct{}
	closed   bool
	// failed is set once by fail: every stream ended with it, and new
	// streams are born ended.
	failed error
	// slowWarned is when a slow client was last logged (at most every
	// slowWarnEvery: under load many fall behind at once).
	slowWarned time.Time

	// prevWatchers counts the watchers with prev_kv. It is changed under
	// mu and read without it by the writer (wantsPrev): a watcher added
	// while a batch is evaluated meets that batch's partial changes,
	// which publish and the ring send it through the log.
	prevWatchers atomic.Int64

	syncc  chan struct{} // wakes syncLoop
	ctx    context.Context
	cancel context.CancelFunc
	stopc  chan struct{}
	wg     sync.WaitGroup
}

func newWatchHub(cfg hubConfig) *watchHub {
	h := &watchHub{
		cfg:              cfg,
		log:              cfg.logger,
		queueLen:         orDefault(cfg.queueLen, defaultQueueLen),
		historyBatch:     orDefault(cfg.historyBatch, 4096),
		progressInterval: cfg.progressInterval,
		rev:              cfg.startRev,
		ring: newRing(orDefault(cfg.ringRevisions, defaultRingRevisions),
			orDefault(cfg.ringBytes, defaultRingBytes), cfg.startRev+1),
		synced:   newWatcherGroup(),
		unsynced: make(map[*watcher]struct{}),
		streams:  make(map[*WatchStream]struct{}),
		syncc:    make(chan struct{}, 1),
		stopc:    make(chan struct{}),
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	h.log = h.log.With("component", "watch")
	if h.progressInterval <= 0 {
		h.progressInterval = defaultProgressInterval
	}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	h.wg.Add(1)
	go h.syncLoop()
	return h
}

func orDefault(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

// publish hands revision rev to the hub. It is called by the store's single
// writer after each commit, once per revision in order, with the revision's
// changes in sub order and PrevKV filled; the hub keeps changes, so the
// caller must not modify them afterwards. It never waits for a client: a
// watcher whose stream queue is full becomes unsynced instead.
func (h *watchHub) publish(rev int64, changes []Change) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || h.failed != nil {
		return
	}
	if rev <= h.rev {
		h.log.Error("revision published twice; ignored", "rev", rev, "last", h.rev)
		return
	}
	if rev != h.rev+1 {
		h.log.Error("revisions skipped by publish; watchers will read them from the log",
			"rev", rev, "last", h.rev)
		h.unsyncAllLocked(h.rev+1, rev)
	}
	h.rev = rev
	changes = prevBeforeRevision(changes)
	h.ring.push(rev, changes)

	// One response per watcher holds all its events of rev (atomicity). The
	// two event variants of a change are shared by the watchers that get them.
	var order []*watcher
	batches := make(map[*watcher][]*mvccpb.Event)
	// fromLog: prev_kv watchers that want a change whose previous value
	// was not read (Change.PartialPrev); they take the whole revision
	// from the log instead.
	var fromLog map[*watcher]bool
	compacted := h.cfg.compacted()
	for _, c := range changes {
		var plain, withPrev *mvccpb.Event
		h.synced.each(c.KV.Key, func(w *watcher) {
			if rev < w.next || !w.wants(c) {
				return
			}
			if w.prevKV && c.PartialPrev {
				if fromLog == nil {
					fromLog = map[*watcher]bool{}
				}
				fromLog[w] = true
				return
			}
			var ev *mvccpb.Event
			if w.prevKV {
				if withPrev == nil {
					withPrev = w.event(c, compacted)
				}
				ev = withPrev
			} else {
				if plain == nil {
					plain = w.event(c, compacted)
				}
				ev = plain
			}
			if _, ok := batches[w]; !ok {
				order = append(order, w)
			}
			batches[w] = append(batches[w], ev)
		})
	}
	for w := range fromLog {
		h.unsyncLocked(w, rev)
	}
	for _, w := range order {
		if fromLog[w] {
			continue
		}
		resp := &pb.WatchResponse{Header: header(rev), WatchId: w.id, Events: batches[w]}
		if !w.stream.tryEnqueue(resp) {
			h.unsyncLocked(w, rev)
			h.warnSlowLocked()
			continue
		}
		w.next = rev + 1
		w.progressDue = false
	}
}

// wantsPrev says whether a watcher may want the previous values of the
// rows the next writes replace (evaluator.prevValues).
func (h *watchHub) wantsPrev() bool { return h.prevWatchers.Load() > 0 }

// slowWarnEvery bounds how often slow watchers are logged.
const slowWarnEvery = 10 * time.Second

// warnSlowLocked says that a watcher's client does not read its events as
// fast as they come (its stream queue is full), as operators learn of
// etcd's slow watchers: it is caught up from history instead of the live
// feed, which costs reads.
func (h *watchHub) warnSlowLocked() {
	if now := time.Now(); now.Sub(h.slowWarned) >= slowWarnEvery {
		h.slowWarned = now
		h.log.Warn("slow watchers: a watch client is not reading its events as fast as they are written; its watchers are caught up from history",
			"unsynced_watchers", len(h.unsynced), "revision", h.rev)
	}
}

// slowWatchers is etcd's slow_watcher_total: the watchers not on the live
// feed (behind a full stream, or catching up from history).
func (h *watchHub) slowWatchers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.unsynced)
}

// skipTo moves the hub past revisions it will never be handed (they were
// compacted before this Store saw them): watchers that need them read the
// log, which answers that they are compacted.
func (h *watchHub) skipTo(rev int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || rev <= h.rev {
		return
	}
	h.unsyncAllLocked(h.rev+1, rev+1)
	h.rev = rev
	h.ring.reset(rev + 1)
}

// unsyncLocked moves a synced watcher to the catch-up set, needing next on.
func (h *watchHub) unsyncLocked(w *watcher, next int64) {
	h.synced.delete(w)
	w.state = unsynced
	w.next = max(w.next, next)
	h.unsynced[w] = struct{}{}
	h.wakeSync()
}

// unsyncAllLocked sends to the log every synced watcher that needs one of
// the revisions from skipped up to rev, which publish never saw.
func (h *watchHub) unsyncAllLocked(skipped, rev int64) {
	for ws := range h.streams {
		for _, w := range ws.watchers {
			if w.state == synced && w.next < rev {
				h.unsyncLocked(w, skipped)
			}
		}
	}
}

// addWatcherLocked registers a new watcher as etcd does: start revision 0
// or in the future is synced at once (it needs nothing published so far);
// a start revision at or below the current one is caught up first.
func (h *watchHub) addWatcherLocked(w *watcher) {
	if w.prevKV {
		h.prevWatchers.Add(1)
	}
	if w.startRev == 0 || w.startRev > h.rev {
		w.state = synced
		w.next = max(h.rev+1, w.startRev)
		h.synced.add(w)
		return
	}
	w.state = unsynced
	w.next = w.startRev
	h.unsynced[w] = struct{}{}
	h.wakeSync()
}

func (h *watchHub) removeWatcherLocked(w *watcher) {
	if w.prevKV && w.state != removed {
		h.prevWatchers.Add(-1)
	}
	switch w.state {
	case synced:
		h.synced.delete(w)
	case unsynced:
		delete(h.unsynced, w)
	}
	w.state = removed
}

// closeStreamLocked removes the stream's watchers and stops its goroutine,
// once; the goroutine closes Responses.
func (h *watchHub) closeStreamLocked(ws *WatchStream) {
	if ws.closed {
		return
	}
	ws.closed = true
	for _, w := range ws.watchers {
		h.removeWatcherLocked(w)
	}
	delete(h.streams, ws)
	close(ws.stopc)
}

// wakeSync tells syncLoop there may be work; it never blocks.
func (h *watchHub) wakeSync() {
	select {
	case h.syncc <- struct{}{}:
	default:
	}
}

// fail ends every stream with err, and every stream opened later at once.
// It is called when the storage is found to have lost revisions this
// server published: a watcher left open would wait, as if healthy, for
// revisions whose numbers the storage no longer holds, and a client such as
// kube-apiserver's watch cache must learn that its history is not the
// storage's any more. The hub's goroutines keep running until close.
func (h *watchHub) fail(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || h.failed != nil {
		return
	}
	h.failed = err
	for ws := range h.streams {
		h.closeStreamLocked(ws)
	}
}

// close stops every goroutine of the hub and closes every stream's
// Responses channel. Later publishes are ignored and new streams are born
// closed.
func (h *watchHub) close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	for ws := range h.streams {
		h.closeStreamLocked(ws)
	}
	h.mu.Unlock()
	h.cancel()
	close(h.stopc)
	h.wg.Wait()
}
