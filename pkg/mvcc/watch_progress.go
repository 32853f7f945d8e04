package mvcc

import (
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// Progress notifications are queued under watchHub.mu behind everything
// publish and the sync loop queued before them, and only when the watchers
// they speak for are synced: a notification at revision R therefore reaches
// the client after every event up to R of those watchers.

// RequestProgress queues {WatchId: -1} at the current revision if every
// watcher of the stream is synced and has reached its start revision.
// Otherwise, as in etcd 3.7, nothing is sent: the client learns progress
// from the events still on their way, or asks again.
func (ws *WatchStream) RequestProgress() {
	h := ws.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	if ws.closed || len(ws.watchers) == 0 {
		return
	}
	for _, w := range ws.watchers {
		if w.state != synced || h.rev < w.startRev {
			return
		}
	}
	ws.tryEnqueue(&pb.WatchResponse{Header: header(h.rev), WatchId: invalidWatchID})
}

// progressTick is the periodic progress notification of etcd's sendLoop:
// a progress_notify watcher that got no event response since the previous
// tick receives {WatchId: id} at the current revision, if it is synced and
// has reached its start revision.
func (h *watchHub) progressTick(ws *WatchStream) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ws.closed {
		return
	}
	for _, w := range ws.watchers {
		if !w.progress {
			continue
		}
		if w.progressDue && w.state == synced && h.rev >= w.startRev {
			ws.tryEnqueue(&pb.WatchResponse{Header: header(h.rev), WatchId: w.id})
		}
		w.progressDue = true
	}
}
