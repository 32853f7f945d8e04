package mvcc

import (
	"context"
	"encoding/binary"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// pageCounts remembers the total of a paginated list for its next page.
//
// A paginated list (kube-apiserver's, etcdctl's) asks for limit keys of
// [key, end) at revision rev, then for [lastKey+"\x00", end) at the same rev,
// and every answer must carry the count of its whole remaining range. Counting
// that again for each page walks the rest of the range each time: quadratic in
// the list's length, and the largest single cost of a long list after the rows
// themselves. But the keys of a range at a revision never change (a read below
// the compacted revision fails before it gets here), so once a page of limit
// keys out of count is served, the next page's count is count-limit. Entries
// are facts about a fixed revision, so they never go stale; the cache is only
// bounded, oldest entry out first.
type pageCounts struct {
	mu    sync.Mutex
	byKey *ringMap[int64]
}

const (
	pageCountEntries = 512
	// pageCountMaxKey keeps a few huge keys from pinning much memory.
	pageCountMaxKey = 4 << 10
)

func newPageCounts() *pageCounts {
	return &pageCounts{byKey: newRingMap[int64](pageCountEntries)}
}

func pageCountKey(rev int64, key, end []byte) string {
	b := make([]byte, 0, 8+binary.MaxVarintLen64+len(key)+len(end))
	b = binary.BigEndian.AppendUint64(b, uint64(rev))
	b = binary.AppendUvarint(b, uint64(len(key)))
	b = append(b, key...)
	return string(append(b, end...))
}

func (c *pageCounts) get(rev int64, key, end []byte) (int64, bool) {
	k := pageCountKey(rev, key, end)
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byKey.get(k)
}

func (c *pageCounts) put(rev int64, key, end []byte, n int64) {
	if len(key)+len(end) > pageCountMaxKey {
		return
	}
	k := pageCountKey(rev, key, end)
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.byKey.get(k); !ok {
		c.byKey.set(k, n)
	}
}

// rememberNextPage records the count of the page after resp, when resp is a
// page of exactly r.Limit keys taken in key order from the start of
// [r.Key, end) at rev: the only shape whose next page's count follows from
// this one's.
func (c *pageCounts) rememberNextPage(r *pb.RangeRequest, resp *pb.RangeResponse, rev int64) {
	if !resp.More || r.CountOnly || r.Limit <= 0 || int64(len(resp.Kvs)) != r.Limit ||
		!keyOrdered(r) || hasRevisionFilters(r) || resp.Count < r.Limit {
		return
	}
	last := resp.Kvs[len(resp.Kvs)-1].Key
	next := KeyAfter(last)
	c.put(rev, next, rangeEnd(r.RangeEnd), resp.Count-r.Limit)
}

// keyOrdered reports whether r's page is the first keys of its range in key
// order. defaultOrdering is not enough: with order NONE and another target,
// etcd reads the first limit+1 keys and sorts them by that target, so the
// page's last key says nothing about where the rest of the range starts.
func keyOrdered(r *pb.RangeRequest) bool {
	return r.SortTarget == pb.RangeRequest_KEY &&
		(r.SortOrder == pb.RangeRequest_NONE || r.SortOrder == pb.RangeRequest_ASCEND)
}

// countingTx answers Count from pageCounts when it can, and from the
// transaction otherwise. hit records that it could.
type countingTx struct {
	ReadTx
	counts *pageCounts
	hit    bool
}

func (t *countingTx) Count(ctx context.Context, key, end []byte, rev int64) (int64, error) {
	if n, ok := t.counts.get(rev, key, end); ok {
		t.hit = true
		return n, nil
	}
	return t.ReadTx.Count(ctx, key, end, rev)
}

var _ rangeReader = (*countingTx)(nil)
