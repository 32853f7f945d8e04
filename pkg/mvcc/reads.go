package mvcc

import (
	"context"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// readCache is what the Store remembers between reads to answer later
// ones with less work: the count of a paginated list's remaining range
// (pageCounts), each range's newest count carried forward through the log
// (rangeCounts), the pages of a paginated list read ahead of the client
// (readAhead), and older-revision reads of ranges nothing has changed since
// served from the live index (unchangedTx). None of it changes an answer:
// every entry is a fact about a fixed revision, checked against the log.
type readCache struct {
	// beginRead opens a read transaction with its current and compacted
	// revisions; revisions returns the Store's published ones.
	beginRead func(ctx context.Context) (ReadTx, int64, int64, error)
	revisions func() (current, compacted int64)

	pageCounts  *pageCounts
	rangeCounts *rangeCounts
	ahead       *readAhead

	// ctx ends at close; reads ahead run in it and are counted in wg.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newReadCache(beginRead func(ctx context.Context) (ReadTx, int64, int64, error),
	revisions func() (int64, int64), aheadBytes int64) *readCache {
	c := &readCache{beginRead: beginRead, revisions: revisions, pageCounts: newPageCounts(), rangeCounts: newRangeCounts()}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.ahead = newReadAhead(c, aheadBytes)
	return c
}

// close stops reading ahead and waits for the reads in flight.
func (c *readCache) close() {
	c.ahead.close()
	c.cancel()
	c.wg.Wait()
}

// unchanged wraps a read transaction for executeRange: older revisions of
// unchanged ranges read from the live index, counts carried forward.
func (c *readCache) unchanged(tx ReadTx, current, compacted int64) *unchangedTx {
	return &unchangedTx{ReadTx: tx, current: current, compacted: compacted, counts: c.rangeCounts}
}

// rangeUncounted answers r without counting the keys of the whole range.
func (c *readCache) rangeUncounted(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	tx, current, compacted, err := c.beginRead(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	return executeRange(ctx, c.unchanged(tx, current, compacted), r, current, compacted, false)
}

// rangeCounted answers r with its count: from a page read ahead when there
// is one, and then reading the pages after it ahead of the client.
func (c *readCache) rangeCounted(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	// A page read ahead holds the rows at r.Revision, which never change;
	// only a compaction since can make the answer an error instead.
	if resp := c.ahead.take(ctx, r); resp != nil {
		if current, compacted := c.revisions(); r.Revision >= compacted {
			resp.Header.Revision = current
			return resp, nil
		}
	}
	resp, continued, err := c.readPage(ctx, r)
	if err != nil {
		return nil, err
	}
	if continued {
		c.ahead.follow(r, resp)
	}
	return resp, nil
}

// readPage answers a Range from a fresh snapshot, counting through
// pageCounts. continued reports that r continues a paginated list (its
// count was known from the previous page).
func (c *readCache) readPage(ctx context.Context, r *pb.RangeRequest) (resp *pb.RangeResponse, continued bool, err error) {
	tx, current, compacted, err := c.beginRead(ctx)
	if err != nil {
		return nil, false, err
	}
	defer tx.Rollback()
	ctr := &countingTx{ReadTx: c.unchanged(tx, current, compacted), counts: c.pageCounts}
	if resp, err = executeRange(ctx, ctr, r, current, compacted, true); err != nil {
		return nil, false, err
	}
	rev, _ := checkRevision(r.Revision, current, compacted) // executeRange has accepted it
	c.pageCounts.rememberNextPage(r, resp, rev)
	return resp, ctr.hit, nil
}
