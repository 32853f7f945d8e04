package mvcc

import (
	"bytes"
	"slices"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// watchBatchMaxRevs bounds the distinct revisions of one catch-up response,
// as etcd's watchBatchMaxRevs does, so a watcher far behind is fed in steps
// instead of one response holding its whole backlog.
const watchBatchMaxRevs = 1000

// watcherState says which set of the hub a watcher is in. Every transition
// happens under watchHub.mu.
type watcherState uint8

const (
	// synced: every matching event up to the hub's revision is queued on the
	// stream; publish feeds the watcher directly.
	synced watcherState = iota
	// unsynced: the watcher needs revisions from next on, which publish did
	// not give it (past start revision, or its stream queue was full); the
	// sync loop catches it up from the ring or the log.
	unsynced
	// compacted: the watcher was told its next revision is compacted. It gets
	// nothing more, but keeps its ID until the client cancels it, as in etcd.
	compacted
	// removed: canceled or its stream closed.
	removed
)

// watcher is one watch of a stream. Fields after the blank line are guarded
// by watchHub.mu.
type watcher struct {
	id     int64
	stream *WatchStream
	key    []byte
	// end follows etcd's watcher: nil watches key alone, empty (non-nil)
	// watches every key >= key, otherwise [key, end).
	end      []byte
	startRev int64 // as requested; 0 means "from now"
	noPut    bool
	noDelete bool
	prevKV   bool
	fragment bool
	progress bool // progress_notify

	state watcherState
	// next is the lowest revision the watcher still needs. For a synced
	// watcher it may lag behind revisions that had no matching event.
	next int64
	// progressDue is etcd's per-watcher progress flag: true when no event
	// response was queued since the last periodic progress tick.
	progressDue bool
}

func (w *watcher) contains(key []byte) bool {
	if w.end == nil {
		return bytes.Equal(key, w.key)
	}
	if bytes.Compare(key, w.key) < 0 {
		return false
	}
	return len(w.end) == 0 || bytes.Compare(key, w.end) < 0
}

// wants reports whether c passes the watcher's key range and filters.
func (w *watcher) wants(c Change) bool {
	if c.Deleted && w.noDelete || !c.Deleted && w.noPut {
		return false
	}
	return w.contains(c.KV.Key)
}

// event builds the event w receives for c. PrevKv is set only when the
// watcher asked for it, as etcd's server fills it only for prev_kv watchers,
// and only while the revision before the event is not compacted: etcd reads
// prev_kv at send time as a range at that revision, which then fails, and
// kube-apiserver relies on the missing prev_kv to notice the compaction.
func (w *watcher) event(c Change, compacted int64) *mvccpb.Event {
	ev := &mvccpb.Event{Type: mvccpb.Event_PUT, Kv: c.KV}
	if c.Deleted {
		ev.Type = mvccpb.Event_DELETE
	}
	if w.prevKV && c.KV.ModRevision-1 >= compacted {
		ev.PrevKv = c.PrevKV
	}
	return ev
}

// prevBeforeRevision gives the changes the prev_kv etcd's server sends,
// which it reads as the key at the revision before the event (and never for
// a put that creates its key), where the log (and Apply) give the row the
// change replaced. The two differ only for a key changed twice in one
// revision (a from-key delete in a txn may overlap the txn's puts: put then
// delete, or delete, put and delete again): the later change replaced a
// row of its own revision. Its prev is then the one of the key's first
// change in the revision, which replaced the row from before it; a put
// that recreates the key after its delete has none. changes run in
// (revision, sub) order from the first change of a revision, as publish and
// the log reads give them. They are shared (with the caller, the ring), so
// a copy is fixed, and only when one needs it: the common revision costs
// one comparison per change.
func prevBeforeRevision(changes []Change) []Change {
	var out []Change
	for i, c := range changes {
		rev := changeRev(c)
		if c.PrevKV == nil || c.PrevKV.ModRevision != rev {
			continue
		}
		if out == nil {
			out = slices.Clone(changes)
		}
		out[i].PrevKV = nil
		if !c.Deleted && c.KV.CreateRevision == rev {
			continue
		}
		for j := i - 1; j >= 0 && changeRev(changes[j]) == rev; j-- {
			if bytes.Equal(changes[j].KV.Key, c.KV.Key) {
				out[i].PrevKV = changes[j].PrevKV // the first one, once the loop ends
			}
		}
	}
	if out == nil {
		return changes
	}
	return out
}

// changeRev is the main revision of a log row.
func changeRev(c Change) int64 { return c.KV.ModRevision }

// eventBatch gathers one watcher's catch-up events over several revisions,
// stopping before the revision that would exceed watchBatchMaxRevs.
type eventBatch struct {
	evs     []*mvccpb.Event
	revs    int
	lastRev int64
	// cut is the first revision left out because the batch was full.
	cut int64
}

// add appends ev (of revision rev) and reports false once the batch is
// full; ev is then not taken.
func (b *eventBatch) add(rev int64, ev *mvccpb.Event) bool {
	if b.cut != 0 {
		return false
	}
	if rev != b.lastRev {
		if b.revs == watchBatchMaxRevs {
			b.cut = rev
			return false
		}
		b.revs++
		b.lastRev = rev
	}
	b.evs = append(b.evs, ev)
	return true
}

// coveredTo is the revision the watcher has seen everything up to once the
// batch is delivered, when the scanned rows reached upTo.
func (b *eventBatch) coveredTo(upTo int64) int64 {
	if b.cut != 0 {
		return b.cut - 1
	}
	return upTo
}

func header(rev int64) *pb.ResponseHeader { return &pb.ResponseHeader{Revision: rev} }
