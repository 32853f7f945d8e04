package mvcc

// Default bounds of the ring of recent revisions. A watcher that falls a
// little behind, or starts from a revision a few seconds old (kube-apiserver
// resuming from its watch cache), is served from memory; only older
// history costs a read of the log.
const (
	defaultRingRevisions = 1024
	defaultRingBytes     = 16 << 20
)

// ring keeps the changes of the most recent published revisions, a
// contiguous run ending at the hub's revision. It is guarded by watchHub.mu.
type ring struct {
	maxRevs  int
	maxBytes int
	entries  []ringEntry // entries[i] holds revision first+i
	first    int64
	bytes    int
	// partialTo is the newest revision pushed with a change whose previous
	// value was not read (Change.PartialPrev): the ring serves a prev_kv
	// watcher only after it, and the log serves the revisions before.
	partialTo int64
}

type ringEntry struct {
	changes []Change
	bytes   int
	partial bool // a change lacks its previous value
}

func newRing(maxRevs, maxBytes int, next int64) *ring {
	return &ring{maxRevs: maxRevs, maxBytes: maxBytes, first: next}
}

// end is the revision after the newest one held.
func (r *ring) end() int64 { return r.first + int64(len(r.entries)) }

// covers reports whether every revision from rev up to the newest one held
// is in the ring (vacuously true for rev past the newest), as w needs it:
// a prev_kv watcher needs the previous values too.
func (r *ring) covers(w *watcher, rev int64) bool {
	return rev >= r.first && (!w.prevKV || rev > r.partialTo)
}

// push appends revision rev, which must be end(), and drops the oldest
// revisions beyond the bounds. The newest revision is always kept so that a
// watcher one revision behind never needs the log.
func (r *ring) push(rev int64, changes []Change) {
	if rev != r.end() {
		r.reset(rev)
	}
	n, partial := 0, false
	for _, c := range changes {
		n += changeBytes(c)
		partial = partial || c.PartialPrev
	}
	if partial {
		r.partialTo = rev
	}
	r.entries = append(r.entries, ringEntry{changes: changes, bytes: n, partial: partial})
	r.bytes += n
	for len(r.entries) > 1 && (len(r.entries) > r.maxRevs || r.bytes > r.maxBytes) {
		r.bytes -= r.entries[0].bytes
		r.entries[0] = ringEntry{}
		r.entries = r.entries[1:]
		r.first++
	}
}

// reset forgets every revision; the next one pushed must be next.
func (r *ring) reset(next int64) {
	r.entries = nil
	r.first = next
	r.bytes = 0
}

// scan feeds b with w's events from revision from to the newest one held,
// and returns the revision w has seen everything up to. compacted decides
// which prev_kv are still readable.
//
// A prev_kv watcher stops before a revision that lacks previous values:
// it is left to the log.
func (r *ring) scan(w *watcher, from, compacted int64, b *eventBatch) int64 {
	for rev := from; rev < r.end(); rev++ {
		e := r.entries[rev-r.first]
		if w.prevKV && e.partial {
			return b.coveredTo(rev - 1)
		}
		for _, c := range e.changes {
			if w.wants(c) && !b.add(rev, w.event(c, compacted)) {
				return b.cut - 1 // the batch is full before rev
			}
		}
	}
	return b.coveredTo(r.end() - 1)
}

// changeBytes estimates what a change keeps alive in memory.
func changeBytes(c Change) int {
	n := 64
	if c.KV != nil {
		n += len(c.KV.Key) + len(c.KV.Value)
	}
	if c.PrevKV != nil {
		n += len(c.PrevKV.Key) + len(c.PrevKV.Value)
	}
	return n
}
