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

// pop takes the oldest response, waking whoever waits for room.
func (ws *WatchStream) pop() (queued, bool) {
	ws.qmu.Lock()
	if len(ws.queue) == 0 {
		ws.qmu.Unlock()
		return queued{}, false
	}
	q := ws.queue[0]
	ws.queue[0] = queued{}
	ws.queue = ws.queue[1:]
	if len(ws.queue) == 0 {
		ws.queue = nil // let the backing array go
	}
	wakeSync := ws.needRoom && len(ws.queue) <= ws.hub.queueLen/2
	if wakeSync {
		ws.needRoom = false
	}
	ws.qmu.Unlock()

	select {
	case ws.room <- struct{}{}:
	default:
	}
	if wakeSync {
		ws.hub.wakeSync()
	}
	return q, true
}

// run moves responses from the queue to the Responses channel, one at a
// time, and drives the periodic progress notifications of the stream. It is
// the only sender on ws.out and closes it when the stream stops.
func (ws *WatchStream) run(progressEvery time.Duration) {
	defer ws.hub.wg.Done()
	defer close(ws.donec)
	defer close(ws.out)
	defer ws.dropQueue()
	ticker := time.NewTicker(progressEvery)
	defer ticker.Stop()
	tick := ticker.C
	for {
		q, ok := ws.pop()
		if !ok {
			select {
			case <-ws.wake:
			case <-tick:
				ws.hub.progressTick(ws)
			case <-ws.stopc:
				return
			}
			continue
		}
		for sent := false; !sent; {
			select {
			case ws.out <- q.resp:
				sent = true
			case <-tick:
				ws.hub.progressTick(ws)
			case <-ws.stopc:
				return
			}
		}
		ws.afterSend(q)
	}
}

// dropQueue releases what a closed stream will never send.
func (ws *WatchStream) dropQueue() {
	ws.qmu.Lock()
	ws.queue = nil
	ws.qmu.Unlock()
}

// afterSend records the fragment choice of a watch ID only once its
// created (or canceled) answer has been taken by the consumer. The channel
// is unbuffered, so the consumer has finished with every earlier response
// by then, and Fragment answers for the response it holds.
func (ws *WatchStream) afterSend(q queued) {
	if q.frag == fragKeep {
		return
	}
	ws.fmu.Lock()
	defer ws.fmu.Unlock()
	if q.frag == fragSet {
		ws.fragments[q.resp.WatchId] = true
	} else {
		delete(ws.fragments, q.resp.WatchId)
	}
}
