package server

import (
	"context"
	"math"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"

	"github.com/kite-db/kite/pkg/mvcc"
)

// initialStreamChunkLimit is the key count of a RangeStream's first chunk
// (etcd's value); later chunks grow or shrink toward MaxRequestBytes.
const initialStreamChunkLimit = 10

// RangeStream is etcd 3.7's streaming Range. Like etcd it answers a range as
// a series of RangeResponse chunks read at one pinned revision: every chunk
// carries only Kvs, and the last one also carries the header, More and
// Count. kube-apiserver lists through it and falls back to paged Range only
// on Unimplemented (which checkRangeStreamRequest returns for sorts and
// revision filters, as etcd does).
func (s *kvServer) RangeStream(r *pb.RangeRequest, rs pb.KV_RangeStreamServer) error {
	if err := checkRangeStreamRequest(r); err != nil {
		return err
	}
	if s.authz.enabled() {
		if err := s.authz.check(rs.Context(), r); err != nil {
			return toGRPCError(err)
		}
	}
	if err := s.rangeStream(r, rs); err != nil {
		return toGRPCError(err)
	}
	return nil
}

func (s *kvServer) rangeStream(r *pb.RangeRequest, rs pb.KV_RangeStreamServer) error {
	ctx := rs.Context()
	// Work on a copy: the loop rewrites Key, Limit and Revision.
	r = proto.CloneOf(r)
	send := func(out *pb.RangeResponse) error {
		if out.Header != nil {
			out.Header = s.hdr.fillWithoutRevision(out.Header)
		}
		return rs.Send(&pb.RangeStreamResponse{RangeResponse: out})
	}

	if r.CountOnly {
		resp, err := s.store.Range(ctx, r)
		if err != nil {
			return err
		}
		return send(&pb.RangeResponse{
			Header: &pb.ResponseHeader{Revision: resp.GetHeader().GetRevision()},
			Count:  resp.Count,
		})
	}

	// Reading the next chunk overlaps sending this one: a reader goroutine
	// hands finished chunks to this one through a one-slot channel, so on
	// two cores SQLite and the protobuf encoding run side by side.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	chunks := make(chan streamChunk, 1)
	go s.readChunks(ctx, r, chunks)
	for c := range chunks {
		if c.err != nil {
			return c.err
		}
		if err := send(c.resp); err != nil {
			return err
		}
	}
	return nil
}

// streamChunk is one RangeStream answer, or the error that ends the stream.
type streamChunk struct {
	resp *pb.RangeResponse
	err  error
}

// readChunks reads r's range chunk by chunk at the revision of the first
// chunk and hands each finished answer to out, which it closes at the end
// (after an error chunk, if any).
func (s *kvServer) readChunks(ctx context.Context, r *pb.RangeRequest, out chan<- streamChunk) {
	defer close(out)
	emit := func(c streamChunk) bool {
		select {
		case out <- c:
			return true
		case <-ctx.Done():
			return false
		}
	}
	totalLimit := r.Limit
	if totalLimit <= 0 {
		totalLimit = math.MaxInt64
	}
	r.Limit = min(int64(initialStreamChunkLimit), totalLimit)

	var count, headerRev int64
	for {
		resp, err := s.store.RangePage(ctx, r)
		if err != nil {
			emit(streamChunk{err: err})
			return
		}
		// Pin the revision of the first chunk so that writes committed
		// while the stream runs never show up in later chunks.
		if headerRev == 0 {
			headerRev = resp.GetHeader().GetRevision()
			if r.Revision == 0 {
				r.Revision = headerRev
			}
		}
		count += int64(len(resp.Kvs))

		more := resp.More && len(resp.Kvs) > 0
		var nextKey []byte
		if more {
			nextKey = mvcc.KeyAfter(resp.Kvs[len(resp.Kvs)-1].Key)
		}
		chunk := &pb.RangeResponse{Kvs: resp.Kvs}
		done := !more || count >= totalLimit
		if done {
			chunk.Header = &pb.ResponseHeader{Revision: headerRev}
			chunk.More = more
			chunk.Count = count
			if more {
				remaining, err := s.countFrom(ctx, r, nextKey)
				if err != nil {
					emit(streamChunk{err: err})
					return
				}
				chunk.Count += remaining
			}
		}
		// The size is taken before the chunk is handed over: the sender
		// may be encoding it already.
		size := proto.Size(resp)
		if !emit(streamChunk{resp: chunk}) || done {
			return
		}
		r.Key = nextKey
		r.Limit = min(adjustChunkLimit(r.Limit, size, s.maxRequestBytes), totalLimit-count)
	}
}

// countFrom counts the keys of r's range from key on, at r's pinned revision.
func (s *kvServer) countFrom(ctx context.Context, r *pb.RangeRequest, key []byte) (int64, error) {
	cr := &pb.RangeRequest{
		Key:          key,
		RangeEnd:     r.RangeEnd,
		Revision:     r.Revision,
		CountOnly:    true,
		Serializable: true,
	}
	resp, err := s.store.Range(ctx, cr)
	if err != nil {
		return 0, err
	}
	return resp.Count, nil
}

// adjustChunkLimit picks the next chunk's key count so each chunk lands near
// the target size. It only doubles or halves outside [target/2, 2*target] so
// responses near the boundary do not thrash, and never returns 0 (which
// would mean "no limit").
func adjustChunkLimit(last int64, lastSize, target int) int64 {
	switch {
	case lastSize < target/2 && last <= math.MaxInt64/2:
		last *= 2
	case lastSize > target*2:
		last /= 2
	}
	return max(last, 1)
}
