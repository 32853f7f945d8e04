package mvcc

import (
	"context"
	"sync"
)

// rangeCounts remembers the newest count of each range asked for and carries
// it forward through the log instead of counting the range again.
//
// A count walks every key of its range in the live index: with 10,000 keys
// about a third of a millisecond of SQLite per call, paid again by every
// count-only request and by the first page of every paginated list. From a
// count n of [key, end) at revision r, the count at a newer revision follows
// from the log rows after r inside the range: a put that creates its key
// (version 1) adds one, a delete (a tombstone, written only for a key that
// exists) takes one away. The rows are read with Changes, at most
// maxUnchangedCheck of them, and only above the compacted revision, where
// the log is whole. Past that bound the range is counted again.
type rangeCounts struct {
	mu      sync.Mutex
	byRange *ringMap[rangeCount]
}

type rangeCount struct {
	rev, n int64
}

const rangeCountEntries = 256

func newRangeCounts() *rangeCounts {
	return &rangeCounts{byRange: newRingMap[rangeCount](rangeCountEntries)}
}

func rangeCountKey(key, end []byte) string {
	return pageCountKey(0, key, end)
}

// count returns the count of [key, end) at rev if a remembered count at or
// below rev carries forward to it; changes reads the log rows after a
// revision (ReadTx.Changes of the caller's transaction).
func (c *rangeCounts) count(ctx context.Context, tx ReadTx, key, end []byte, rev, compacted int64) (int64, bool) {
	k := rangeCountKey(key, end)
	c.mu.Lock()
	rc, ok := c.byRange.get(k)
	c.mu.Unlock()
	if !ok || rc.rev > rev || rc.rev < compacted {
		return 0, false
	}
	if rc.rev == rev {
		return rc.n, true
	}
	changes, err := tx.Changes(ctx, rc.rev+1, rev, maxUnchangedCheck+1, false)
	if err != nil || len(changes) > maxUnchangedCheck {
		return 0, false
	}
	n := rc.n
	for _, ch := range changes {
		switch {
		case !InRange(ch.KV.Key, key, end):
		case ch.Deleted:
			n--
		case ch.KV.Version == 1:
			n++
		}
	}
	c.put(key, end, rev, n)
	return n, true
}

// put remembers n as the count of [key, end) at rev, unless a newer count
// is known already.
func (c *rangeCounts) put(key, end []byte, rev, n int64) {
	if len(key)+len(end) > pageCountMaxKey {
		return
	}
	k := rangeCountKey(key, end)
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.byRange.get(k); !ok || old.rev < rev {
		c.byRange.set(k, rangeCount{rev: rev, n: n})
	}
}
