package mvcc

import (
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// Default bounds of a stream's queue. defaultQueueLen is etcd's chanBufLen;
// ctrlSlack is etcd's ctrlStreamBufLen: room kept for created and canceled
// answers beyond the events, so a stream full of events still answers its
// client's requests.
const (
	defaultQueueLen = 128
	ctrlSlack       = 16
)

// fragOp is what delivering a response changes in the stream's record of
// which watch IDs asked for fragment.
type fragOp uint8

const (
	fragKeep fragOp = iota
	fragSet
	fragClear
)

type queued struct {
	resp *pb.WatchResponse
	frag fragOp
}

// The queue is the single ordered path of every response of a stream:
// anything appended under watchHub.mu reaches the client in that order. That
// is what keeps a progress notification behind the events it vouches for.

// tryEnqueue appends an event or progress response if the queue has room.
// A false return leaves the caller to retry later; the stream then wakes the
// sync loop once it has drained.
func (ws *WatchStream) tryEnqueue(resp *pb.WatchResponse) bool {
	ws.qmu.Lock()
	defer ws.qmu.Unlock()
	if len(ws.queue) >= ws.hub.queueLen {
		ws.needRoom = true
		return false
	}
	ws.pushLocked(queued{resp: resp})
	return true
}

// enqueueCtrl appends a created or canceled answer unconditionally: the
// client's request must be answered. Callers bound the overshoot with
// waitRoom before taking watchHub.mu.
func (ws *WatchStream) enqueueCtrl(q queued) {
	ws.qmu.Lock()
	ws.pushLocked(q)
	ws.qmu.Unlock()
}

func (ws *WatchStream) pushLocked(q queued) {
	ws.queue = append(ws.queue, q)
	select {
	case ws.wake <- struct{}{}:
	default:
	}
}

// hasRoom reports whether an event response would be accepted now, and
// otherwise asks to be told when the queue has drained.
func (ws *WatchStream) hasRoom() bool {
	ws.qmu.Lock()
	defer ws.qmu.Unlock()
	if len(ws.queue) >= ws.hub.queueLen {
		ws.needRoom = true
		return false
	}
	return true
}

// waitRoom blocks a client request while the queue is past its control
// slack, as etcd's recvLoop blocks on a full ctrlStream: a client that does
// not read its responses stops being served instead of growing memory. It
// returns false when the stream closed.
func (ws *WatchStream) waitRoom() bool {
	for {
		ws.qmu.Lock()
		n := len(ws.queue)
		ws.qmu.Unlock()
		if n < ws.hub.queueLen+ctrlSlack {
			// Pass the wake-up on: another caller may be waiting too.
			select {
			case ws.room <- struct{}{}:
			default:
			}
			return true
		}
		select {
		case <-ws.room:
		case <-ws.stopc:
			return false
		}
	}
}

// popAll takes every queued response, waking whoever waits for room.
// Taking them all at once lets the run loop hand the consumer one batch per
// wake-up instead of one goroutine hand-off per response (with a thousand
// watchers on a stream, a thousand per event).
func (ws *WatchStream) popAll() []queued {
	ws.qmu.Lock()
	qs := ws.queue
	ws.queue = nil
	wakeSync := ws.needRoom && len(qs) > 0
	if wakeSync {
		ws.needRoom = false
	}
	ws.qmu.Unlock()
	if len(qs) == 0 {
		return nil
	}
	select {
	case ws.room <- struct{}{}:
	default:
	}
	if wakeSync {
		ws.hub.wakeSync()
	}
	return qs
}

// Delivery is one response for the client and whether it belongs to a
// watcher that asked for fragment (the sender then splits it if it is too
// large for one message).
type Delivery struct {
	Response *pb.WatchResponse
	Fragment bool
	op       fragOp // for Responses' bookkeeping of Fragment
}

// run moves responses from the queue to the Batches channel, every queued
// response in one batch, and drives the periodic progress notifications of
// the stream. It is the only sender on ws.batches and closes it when the
// stream stops. The fragment choice of each response is taken here, in
// queue order, so it is exact for every response whatever the consumer's
// pace: a watch ID reused after a cancel never inherits the old choice.
func (ws *WatchStream) run(progressEvery time.Duration) {
	defer ws.hub.wg.Done()
	defer close(ws.donec)
	defer close(ws.batches)
	defer ws.dropQueue()
	ticker := time.NewTicker(progressEvery)
	defer ticker.Stop()
	tick := ticker.C
	fragments := map[int64]bool{}
	for {
		qs := ws.popAll()
		if len(qs) == 0 {
			select {
			case <-ws.wake:
			case <-tick:
				ws.hub.progressTick(ws)
			case <-ws.stopc:
				return
			}
			continue
		}
		batch := make([]Delivery, len(qs))
		for i, q := range qs {
			id := q.resp.WatchId
			switch q.frag {
			case fragSet:
				fragments[id] = true
			case fragClear:
				delete(fragments, id)
			}
			batch[i] = Delivery{Response: q.resp, Fragment: id != invalidWatchID && fragments[id], op: q.frag}
		}
		for sent := false; !sent; {
			select {
			case ws.batches <- batch:
				sent = true
			case <-tick:
				ws.hub.progressTick(ws)
			case <-ws.stopc:
				return
			}
		}
	}
}

// dropQueue releases what a closed stream will never send.
func (ws *WatchStream) dropQueue() {
	ws.qmu.Lock()
	ws.queue = nil
	ws.qmu.Unlock()
}

// flatten serves Responses: it hands the batches on one response at a
// time and records each response's fragment choice once the consumer has
// taken it, so Fragment answers for the response the consumer holds.
func (ws *WatchStream) flatten() {
	defer close(ws.flat)
	for batch := range ws.batches {
		for _, d := range batch {
			select {
			case ws.flat <- d.Response:
			case <-ws.stopc:
				return
			}
			if d.op != fragKeep {
				ws.fmu.Lock()
				if d.op == fragSet {
					ws.fragments[d.Response.WatchId] = true
				} else {
					delete(ws.fragments, d.Response.WatchId)
				}
				ws.fmu.Unlock()
			}
		}
	}
}
