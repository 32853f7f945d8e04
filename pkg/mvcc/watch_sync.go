package mvcc

import (
	"fmt"
	"math"
	"sort"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

const (
	// maxWatchersPerSync bounds the watchers one round serves (etcd's
	// maxWatchersPerSync), so one round never holds the hub for long.
	maxWatchersPerSync = 512
	// syncChunk bounds the watchers caught up in one hold of watchHub.mu.
	syncChunk = 64
	// syncRetryMin is the pause before retrying a round that moved nothing
	// (etcd's watchResyncPeriod); failed log reads back off up to syncRetryMax.
	syncRetryMin = 100 * time.Millisecond
	syncRetryMax = 5 * time.Second
)

// syncLoop catches up unsynced watchers. It sleeps until woken (a watcher
// became unsynced, or a full stream drained) and runs rounds only while
// some unsynced watcher can take a response, so a stuck client never makes
// it read the log again and again.
func (h *watchHub) syncLoop() {
	defer h.wg.Done()
	for {
		select {
		case <-h.syncc:
		case <-h.stopc:
			return
		}
		if !h.syncUntilIdle() {
			return
		}
	}
}

// syncUntilIdle runs rounds until no unsynced watcher has room left to take
// a response. It returns false when the hub stops.
func (h *watchHub) syncUntilIdle() bool {
	failures := 0
	for {
		start := time.Now()
		progressed, pending, err := h.syncRound()
		var delay time.Duration
		switch {
		case err != nil:
			failures++
			delay = min(syncRetryMin<<min(failures-1, 6), syncRetryMax)
			h.log.Warn("watch catch-up failed; retrying", "err", err, "retry_in", delay)
		case pending == 0:
			return true
		case progressed:
			// Leave the writer as much time as the round took, as etcd does.
			failures = 0
			delay = min(time.Since(start), syncRetryMin)
		default:
			delay = syncRetryMin
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-h.stopc:
			t.Stop()
			return false
		}
	}
}

// syncRound serves up to maxWatchersPerSync unsynced watchers that have
// room: compacted ones get their compaction answer, the ones the ring
// covers are caught up from memory, the rest from one read of the log. It
// reports whether any watcher moved and how many unsynced watchers could
// take a response now.
func (h *watchHub) syncRound() (progressed bool, pending int, err error) {
	compactRev := h.cfg.compacted() // before mu: it may take the store's lock
	h.mu.Lock()
	var chosen []*watcher
	for w := range h.unsynced {
		if len(chosen) == maxWatchersPerSync {
			break
		}
		if w.stream.hasRoom() {
			chosen = append(chosen, w)
		}
	}
	h.mu.Unlock()

	// Memory catch-up runs under mu, in chunks so that publish, which waits
	// for mu on the writer's goroutine, is never held up for long.
	var fromLog []*watcher
	minNext, withPrev := int64(math.MaxInt64), false
	var to int64
	for len(chosen) > 0 {
		n := min(len(chosen), syncChunk)
		h.mu.Lock()
		for _, w := range chosen[:n] {
			switch {
			case w.state != unsynced:
			case w.next < compactRev:
				progressed = h.compactLocked(w, compactRev) || progressed
			case h.ring.covers(w, w.next):
				progressed = h.catchUpLocked(w, nil, 0) || progressed
			default:
				fromLog = append(fromLog, w)
				minNext = min(minNext, w.next)
				withPrev = withPrev || w.prevKV
			}
		}
		to = h.rev
		h.mu.Unlock()
		chosen = chosen[n:]
	}

	if len(fromLog) > 0 {
		// The log is read without mu: publish goes on meanwhile, and what it
		// adds is found in the ring afterwards.
		rows, readTo, snapCompacted, rerr := h.readHistory(minNext, to, withPrev)
		err = rerr
		compactRev = max(compactRev, snapCompacted)
		for len(fromLog) > 0 && err == nil {
			n := min(len(fromLog), syncChunk)
			h.mu.Lock()
			for _, w := range fromLog[:n] {
				switch {
				case w.state != unsynced:
				case w.next < compactRev:
					progressed = h.compactLocked(w, compactRev) || progressed
				default:
					progressed = h.catchUpLocked(w, rows, readTo) || progressed
				}
			}
			h.mu.Unlock()
			fromLog = fromLog[n:]
		}
	}

	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.unsynced {
		if w.stream.hasRoom() {
			pending++
		}
	}
	return progressed, pending, err
}

// readHistory reads the log rows of revisions from..to, or of a prefix of
// whole revisions when they exceed one batch, with the prev_kv etcd sends
// (prevBeforeRevision), and returns the revision the rows are complete up
// to and the compacted revision of the snapshot.
func (h *watchHub) readHistory(from, to int64, withPrev bool) ([]Change, int64, int64, error) {
	limit := h.historyBatch
	for {
		rows, compactRev, err := h.cfg.history(h.ctx, from, to, limit, withPrev)
		if err != nil {
			return nil, 0, 0, fmt.Errorf("read log revisions %d..%d: %w", from, to, err)
		}
		if len(rows) < limit {
			return prevBeforeRevision(rows), to, compactRev, nil
		}
		last := changeRev(rows[len(rows)-1])
		if changeRev(rows[0]) < last {
			// The last revision may be cut short: leave it to the next round.
			i := sort.Search(len(rows), func(i int) bool { return changeRev(rows[i]) >= last })
			return prevBeforeRevision(rows[:i]), last - 1, compactRev, nil
		}
		// One revision alone fills the batch; it must be delivered whole.
		limit *= 2
	}
}

// catchUpLocked queues w's events from w.next on, taken from rows (the log,
// complete up to rowsTo) and then from the ring, in one response of at most
// watchBatchMaxRevs revisions. A watcher that has seen everything published
// joins the synced set. The header carries the hub's revision, as etcd's
// catch-up responses carry the store's. It reports whether w moved.
func (h *watchHub) catchUpLocked(w *watcher, rows []Change, rowsTo int64) bool {
	var b eventBatch
	covered := w.next - 1
	compacted := h.cfg.compacted()
	if w.next <= rowsTo {
		i := sort.Search(len(rows), func(i int) bool { return changeRev(rows[i]) >= w.next })
		for _, c := range rows[i:] {
			if w.wants(c) && !b.add(changeRev(c), w.event(c, compacted)) {
				break
			}
		}
		covered = b.coveredTo(rowsTo)
	}
	if b.cut == 0 && h.ring.covers(w, covered+1) {
		covered = h.ring.scan(w, covered+1, compacted, &b)
	}
	if len(b.evs) > 0 {
		resp := &pb.WatchResponse{Header: header(h.rev), WatchId: w.id, Events: b.evs}
		if !w.stream.tryEnqueue(resp) {
			return false
		}
		w.progressDue = false
	}
	moved := covered >= w.next
	w.next = covered + 1
	if w.next > h.rev {
		delete(h.unsynced, w)
		w.state = synced
		h.synced.add(w)
		moved = true
	}
	return moved
}

// compactLocked answers a watcher whose next revision is compacted, as
// etcd's chooseAll does: {Canceled, CompactRevision} with header revision 0
// (etcd sends the zero revision of its internal response), after which the
// watcher gets nothing but keeps its ID until canceled. If the queue is
// full the answer is retried next round.
func (h *watchHub) compactLocked(w *watcher, compactRev int64) bool {
	resp := &pb.WatchResponse{Header: header(0), WatchId: w.id, Canceled: true, CompactRevision: compactRev}
	if !w.stream.tryEnqueue(resp) {
		return false
	}
	delete(h.unsynced, w)
	w.state = compacted
	return true
}
