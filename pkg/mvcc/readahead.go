package mvcc

import (
	"context"
	"encoding/binary"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// readAhead reads the next page of a paginated list while the client is still
// receiving the current one.
//
// kube-apiserver (without RangeStream) and etcdctl list a large range as a
// chain of Range requests at one fixed revision, each starting after the last
// key of the previous answer. The pages are strictly sequential: the client
// asks for page n+1 only once it has decoded page n, so the server sits idle
// while the client decodes, and the client while the server reads. The rows
// of a range at a fixed revision never change, so the server can read page
// n+1 as soon as it has answered page n, and answer the request from memory
// when it comes. Only chains already two pages long are followed, so a client
// that reads one page and stops (most single-page reads) costs nothing extra.
//
// A page read ahead is handed to at most one request, which must match it
// exactly (revision, start, end, limit, keys_only, sort target and order); a
// revision compacted since falls through to the normal read, which reports
// ErrCompacted. Pages nobody asked for expire, and the memory held is bounded.
type readAhead struct {
	c        *readCache
	maxBytes int64 // of the pages held

	mu    sync.Mutex
	pages map[string]*aheadPage
	bytes int64 // of the pages held
	// running bounds the reads in flight, so read-ahead never takes more
	// than a share of the machine from the requests being answered.
	running int
	hits    int64
	closed  bool // no read may start: the Store is closing
}

type aheadPage struct {
	done    chan struct{}
	resp    *pb.RangeResponse // nil if the read failed
	bytes   int64
	expires time.Time
	chain   *chain
}

// chain is one client's walk through a range: the newest page read (or
// served), and how many pages are read ahead of the client. Pages are read
// one after the other, up to readAheadDepth ahead, so the read of page n+2
// overlaps the transfer of page n+1.
type chain struct {
	last     *pb.RangeRequest
	lastResp *pb.RangeResponse
	lead     int  // pages read ahead and not yet taken, the one in flight included
	running  bool // a read of this chain is in flight
}

const (
	readAheadDepth      = 2
	readAheadMaxPages   = 16
	readAheadMaxRunning = 2
	readAheadTTL        = 10 * time.Second
)

func newReadAhead(c *readCache, maxBytes int64) *readAhead {
	return &readAhead{c: c, maxBytes: maxBytes, pages: map[string]*aheadPage{}}
}

// followable reports whether r is a request whose next page can be read
// ahead: a key-ordered, unfiltered page of a range at a fixed revision.
func followable(r *pb.RangeRequest) bool {
	return r.Revision > 0 && r.Limit > 0 && !r.CountOnly && len(r.RangeEnd) > 0 &&
		keyOrdered(r) && !hasRevisionFilters(r)
}

func aheadKey(r *pb.RangeRequest) string {
	b := make([]byte, 0, 32+len(r.Key)+len(r.RangeEnd))
	b = binary.BigEndian.AppendUint64(b, uint64(r.Revision))
	b = binary.BigEndian.AppendUint64(b, uint64(r.Limit))
	if r.KeysOnly {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(r.SortTarget))
	b = binary.AppendUvarint(b, uint64(r.SortOrder))
	b = binary.AppendUvarint(b, uint64(len(r.Key)))
	b = append(b, r.Key...)
	return string(append(b, r.RangeEnd...))
}

// take returns the page read ahead for r, waiting for a read in flight, or
// nil when there is none (or it failed).
func (ra *readAhead) take(ctx context.Context, r *pb.RangeRequest) *pb.RangeResponse {
	if !followable(r) {
		return nil
	}
	k := aheadKey(r)
	ra.mu.Lock()
	p, ok := ra.pages[k]
	if ok {
		delete(ra.pages, k)
	}
	ra.mu.Unlock()
	if !ok {
		return nil
	}
	var served bool
	select {
	case <-p.done:
		served = true
	case <-ctx.Done():
	}
	ra.mu.Lock()
	defer ra.mu.Unlock()
	ra.bytes -= p.bytes
	if !served || p.resp == nil {
		return nil
	}
	ra.hits++
	p.chain.lead--
	ra.advanceLocked(p.chain)
	return p.resp
}

// close stops new reads; readCache.close waits for those running.
func (ra *readAhead) close() {
	ra.mu.Lock()
	defer ra.mu.Unlock()
	ra.closed = true
}

// next is the request for the page after resp, the answer to r.
func next(r *pb.RangeRequest, resp *pb.RangeResponse) *pb.RangeRequest {
	last := resp.Kvs[len(resp.Kvs)-1].Key
	n := &pb.RangeRequest{
		Key:          KeyAfter(last),
		RangeEnd:     r.RangeEnd,
		Limit:        r.Limit,
		Revision:     r.Revision,
		KeysOnly:     r.KeysOnly,
		SortOrder:    r.SortOrder,
		SortTarget:   r.SortTarget,
		Serializable: r.Serializable,
	}
	return n
}

// follow starts a chain after resp, the answer to r, read afresh: r
// continues a paginated list, so the client will likely ask for the next
// pages.
func (ra *readAhead) follow(r *pb.RangeRequest, resp *pb.RangeResponse) {
	if !followable(r) {
		return
	}
	ra.mu.Lock()
	defer ra.mu.Unlock()
	ra.advanceLocked(&chain{last: r, lastResp: resp})
}

// advanceLocked reads c's next page if c is not already reading, is less
// than readAheadDepth pages ahead, has more to read, and there is room.
func (ra *readAhead) advanceLocked(c *chain) {
	if c.running || c.lead >= readAheadDepth || !c.lastResp.More || len(c.lastResp.Kvs) == 0 || ra.closed {
		return
	}
	var size int64
	for _, kv := range c.lastResp.Kvs {
		size += int64(len(kv.Key) + len(kv.Value))
	}
	n := next(c.last, c.lastResp)
	k := aheadKey(n)
	now := time.Now()
	for pk, p := range ra.pages {
		select {
		case <-p.done:
			if now.After(p.expires) {
				delete(ra.pages, pk)
				ra.bytes -= p.bytes
			}
		default:
		}
	}
	if _, dup := ra.pages[k]; dup || ra.running >= readAheadMaxRunning ||
		len(ra.pages) >= readAheadMaxPages || ra.bytes+size > ra.maxBytes {
		return
	}
	// The next page is about as large as this one.
	p := &aheadPage{done: make(chan struct{}), bytes: size, expires: now.Add(readAheadTTL), chain: c}
	ra.pages[k] = p
	ra.bytes += size
	ra.running++
	c.lead++
	c.running = true
	ra.c.wg.Add(1)

	go func() {
		defer ra.c.wg.Done()
		resp, _, err := ra.c.readPage(ra.c.ctx, n)
		ra.mu.Lock()
		defer ra.mu.Unlock()
		ra.running--
		c.running = false
		p.expires = time.Now().Add(readAheadTTL)
		if err != nil {
			close(p.done)
			return // the chain stops; the client's request reads afresh
		}
		p.resp = resp
		close(p.done)
		c.last, c.lastResp = n, resp
		ra.advanceLocked(c)
	}()
}
