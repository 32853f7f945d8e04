package mvcc

import (
	"bytes"
	"context"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// maxUnchangedCheck bounds the log rows read to prove a range unchanged: a
// paginated list's later pages are read at its first page's revision, a few
// writes behind the current one on a busy store. Past this many, the history
// read is cheaper than the proof.
const maxUnchangedCheck = 256

// unchangedTx reads at an older revision from the latest state when nothing
// in the range changed since that revision, which gives the same keys,
// values and count. A driver serves the current revision from its live-key
// index and an older one by walking history, about three times the work per
// page in SQLite; a list paging through one prefix while writes go to
// others (a controller's resync, kube-apiserver's cache refill) is the case.
//
// The proof reads the log after the revision (Changes), at most
// maxUnchangedCheck rows, and looks for a key inside the range; the answer
// of one range is kept so that its Range and Count share it.
type unchangedTx struct {
	ReadTx
	current, compacted int64
	// counts carries counts forward through the log (rangecount.go).
	counts *rangeCounts

	lastKey, lastEnd []byte
	lastRev          int64
	lastServe        int64
}

func (t *unchangedTx) Range(ctx context.Context, key, end []byte, rev, limit int64, keysOnly bool) ([]*mvccpb.KeyValue, error) {
	return t.ReadTx.Range(ctx, key, end, t.serveAt(ctx, key, end, rev), limit, keysOnly)
}

func (t *unchangedTx) Count(ctx context.Context, key, end []byte, rev int64) (int64, error) {
	if n, ok := t.counts.count(ctx, t.ReadTx, key, end, rev, t.compacted); ok {
		return n, nil
	}
	n, err := t.ReadTx.Count(ctx, key, end, t.serveAt(ctx, key, end, rev))
	if err == nil {
		t.counts.put(key, end, rev, n)
	}
	return n, err
}

// serveAt returns the revision to read [key, end) at: current if nothing in
// the range changed after rev, else rev. A failed proof only means the
// history read.
func (t *unchangedTx) serveAt(ctx context.Context, key, end []byte, rev int64) int64 {
	if rev >= t.current {
		return rev
	}
	if t.lastRev == rev && bytes.Equal(t.lastKey, key) && bytes.Equal(t.lastEnd, end) {
		return t.lastServe
	}
	serve := t.current
	changes, err := t.Changes(ctx, rev+1, t.current, maxUnchangedCheck+1, false)
	if err != nil || len(changes) > maxUnchangedCheck {
		serve = rev
	} else {
		for _, c := range changes {
			if InRange(c.KV.Key, key, end) {
				serve = rev
				break
			}
		}
	}
	t.lastKey, t.lastEnd, t.lastRev, t.lastServe = key, end, rev, serve
	return serve
}

// InRange reports whether k is in [key, end) with etcd's conventions: a nil
// end selects key alone, "\x00" every key >= key.
func InRange(k, key, end []byte) bool {
	switch {
	case len(end) == 0:
		return bytes.Equal(k, key)
	case len(end) == 1 && end[0] == 0:
		return bytes.Compare(k, key) >= 0
	}
	return bytes.Compare(k, key) >= 0 && bytes.Compare(k, end) < 0
}
