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
// exactly (revision, start, end, limit, keys_only); a revision compacted since
// falls through to the normal read, which reports ErrCompacted. Pages nobody
// asked for expire, and the memory held is bounded.
type readAhead struct {
	s *Store

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
}

const (
	readAheadMaxPages   = 16
	readAheadMaxBytes   = 64 << 20
	readAheadMaxRunning = 2
	readAheadTTL        = 10 * time.Second
)

func newReadAhead(s *Store) *readAhead {
	return &readAhead{s: s, pages: map[string]*aheadPage{}}
}

// followable reports whether r is a request whose next page can be read
// ahead: a key-ordered, unfiltered page of a range at a fixed revision.
func followable(r *pb.RangeRequest) bool {
	return r.Revision > 0 && r.Limit > 0 && !r.CountOnly && len(r.RangeEnd) > 0 &&
		defaultOrdering(r.SortTarget, r.SortOrder) && !hasRevisionFilters(r)
}

func aheadKey(r *pb.RangeRequest) string {
	b := make([]byte, 0, 24+len(r.Key)+len(r.RangeEnd))
	b = binary.BigEndian.AppendUint64(b, uint64(r.Revision))
	b = binary.BigEndian.AppendUint64(b, uint64(r.Limit))
	if r.KeysOnly {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
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
	select {
	case <-p.done:
	case <-ctx.Done():
		return nil
	}
	ra.mu.Lock()
	ra.bytes -= p.bytes
	if p.resp != nil {
		ra.hits++
	}
	ra.mu.Unlock()
	return p.resp
}

// close stops new reads; the Store's wait group waits for those running.
func (ra *readAhead) close() {
	ra.mu.Lock()
	defer ra.mu.Unlock()
	ra.closed = true
}

// next is the request for the page after resp, the answer to r.
func next(r *pb.RangeRequest, resp *pb.RangeResponse) *pb.RangeRequest {
	last := resp.Kvs[len(resp.Kvs)-1].Key
	n := &pb.RangeRequest{
		Key:          append(append(make([]byte, 0, len(last)+1), last...), 0),
		RangeEnd:     r.RangeEnd,
		Limit:        r.Limit,
		Revision:     r.Revision,
		KeysOnly:     r.KeysOnly,
		Serializable: r.Serializable,
	}
	return n
}

// follow starts reading the page after resp (the answer to r) if r is part
// of a chain, there is room, and the client has more to read.
func (ra *readAhead) follow(r *pb.RangeRequest, resp *pb.RangeResponse) {
	if !followable(r) || !resp.More || len(resp.Kvs) == 0 {
		return
	}
	var size int64
	for _, kv := range resp.Kvs {
		size += int64(len(kv.Key) + len(kv.Value))
	}
	n := next(r, resp)
	k := aheadKey(n)
	now := time.Now()
	ra.mu.Lock()
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
	_, dup := ra.pages[k]
	if dup || ra.closed || ra.running >= readAheadMaxRunning || len(ra.pages) >= readAheadMaxPages ||
		ra.bytes+size > readAheadMaxBytes {
		ra.mu.Unlock()
		return
	}
	// The next page is about as large as this one; its real size replaces
	// the estimate once it is read.
	p := &aheadPage{done: make(chan struct{}), bytes: size, expires: now.Add(readAheadTTL)}
	ra.pages[k] = p
	ra.bytes += size
	ra.running++
	ra.s.wg.Add(1)
	ra.mu.Unlock()

	go func() {
		defer ra.s.wg.Done()
		resp, _, err := ra.s.readPage(ra.s.ctx, n)
		ra.mu.Lock()
		ra.running--
		if err == nil {
			p.resp = resp
		}
		p.expires = time.Now().Add(readAheadTTL)
		ra.mu.Unlock()
		close(p.done)
	}()
}
