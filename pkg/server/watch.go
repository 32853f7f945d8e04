package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/protobuf/proto"

	"github.com/kite-db/kite/pkg/mvcc"
)

// watchServer is etcd's Watch service. Each gRPC stream gets one
// mvcc.WatchStream; everything a client sees on the stream (created,
// canceled, events, progress notifications) comes out of ws.Batches() in
// order, so this layer only translates requests, fills headers and splits
// oversized responses. It never builds a watch response itself: that is
// what keeps the stream's ordering guarantees in one place (pkg/mvcc).
type watchServer struct {
	pb.UnsafeWatchServer

	store *mvcc.Store
	hdr   *header
	log   *slog.Logger
	// stopping is closed when the server shuts down: streams end then
	// instead of holding up the graceful stop until clients leave.
	stopping <-chan struct{}
	// fragmentBytes is the size above which a response of a watcher that
	// asked for fragments is split: MaxRequestBytes plus gRPC overhead, the
	// value etcd uses.
	fragmentBytes int
	metrics       *watchMetrics
	authz         *authorizer
	// kvEnc shares the encoding of a KeyValue between the responses of
	// every watcher it goes to (watch_encode.go).
	kvEnc *kvEncodings
}

var _ pb.WatchServer = (*watchServer)(nil)

func (s *watchServer) Watch(stream pb.Watch_WatchServer) error {
	ctx := stream.Context()
	ws := s.store.NewWatchStream()
	defer ws.Close()
	watchers := s.metrics.openStream()
	defer watchers.close()

	// Recv blocks, so it runs apart from the send loop. It reports only real
	// errors: after EOF (the client closed its side) the stream stays open
	// for responses, as in etcd.
	recvErr := make(chan error, 1)
	go func() {
		if err := s.recvLoop(stream, ws); err != nil {
			recvErr <- err
		}
	}()

	batches := ws.Batches()
	for {
		select {
		case batch, ok := <-batches:
			if !ok {
				// The store closed the stream: the server is stopping, or
				// the storage lost history this server had served.
				if err := ws.Err(); err != nil {
					s.log.ErrorContext(ctx, "ending watch stream", "err", err)
					return toGRPCError(err)
				}
				return rpctypes.ErrGRPCStopped
			}
			for _, d := range batch {
				if err := s.send(stream, d); err != nil {
					logStreamError(ctx, s.log, "send watch response", err)
					return err
				}
				watchers.sent(d.Response)
			}
		case err := <-recvErr:
			logStreamError(ctx, s.log, "receive watch request", err)
			if errors.Is(err, context.Canceled) {
				return rpctypes.ErrGRPCWatchCanceled
			}
			return err
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.Canceled) {
				return rpctypes.ErrGRPCWatchCanceled
			}
			return ctx.Err()
		case <-s.stopping:
			return rpctypes.ErrGRPCStopped
		}
	}
}

// recvLoop turns client requests into WatchStream calls until the client
// closes its side (nil) or the stream fails.
func (s *watchServer) recvLoop(stream pb.Watch_WatchServer, ws *mvcc.WatchStream) error {
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		switch uv := req.GetRequestUnion().(type) {
		case *pb.WatchRequest_CreateRequest:
			if uv.CreateRequest == nil {
				continue
			}
			// The stream normalises the key range and answers rejected
			// requests (negative start revision, empty range, duplicate
			// ID) itself, in order with everything else it sends.
			if err := s.authz.watchPermitted(stream.Context(), uv.CreateRequest); err != nil {
				ws.Reject(watchCancelReason(err))
				continue
			}
			ws.Watch(uv.CreateRequest)
		case *pb.WatchRequest_CancelRequest:
			if uv.CancelRequest != nil {
				ws.Cancel(uv.CancelRequest.WatchId)
			}
		case *pb.WatchRequest_ProgressRequest:
			if uv.ProgressRequest != nil {
				ws.RequestProgress()
			}
		default:
			// An unknown request does not end the stream (etcd ignores it too).
			s.log.DebugContext(stream.Context(), "ignoring unknown watch request", "type", fmt.Sprintf("%T", uv))
		}
	}
}

func (s *watchServer) send(stream pb.Watch_WatchServer, d mvcc.Delivery) error {
	resp := d.Response
	// Responses are shared with the store and must not be modified, so the
	// header is filled on a copy. The store sets the revision of every
	// response (0 on a watcher canceled by compaction, as etcd sends it);
	// it is kept as it is.
	out := copyWatchResponse(resp)
	out.Header = s.hdr.fillWithoutRevision(&pb.ResponseHeader{Revision: resp.GetHeader().GetRevision()})
	send := func(wr *pb.WatchResponse) error {
		data, err := encodeWatchResponse(wr, s.kvEnc)
		if err != nil {
			return err
		}
		return stream.SendMsg(&preEncoded{data: data})
	}
	if d.Fragment {
		return sendFragments(out, s.fragmentBytes, send)
	}
	return send(out)
}

// copyWatchResponse copies every field of a WatchResponse except the
// events' contents. TestWatchResponseFieldCount fails when the message
// grows a field that this (and sendFragments) would drop.
func copyWatchResponse(wr *pb.WatchResponse) *pb.WatchResponse {
	return &pb.WatchResponse{
		Header:          wr.Header,
		WatchId:         wr.WatchId,
		Created:         wr.Created,
		Canceled:        wr.Canceled,
		CompactRevision: wr.CompactRevision,
		CancelReason:    wr.CancelReason,
		Fragment:        wr.Fragment,
		Events:          wr.Events,
	}
}

// sendFragments splits a response too large for one message into several
// with the same header and watch ID, Fragment set on all but the last (the
// client joins them). A response under the limit, or with a single event,
// goes out whole: one event is never split. Each fragment is a new message
// because Send may queue it and return before it is encoded.
func sendFragments(wr *pb.WatchResponse, maxBytes int, send func(*pb.WatchResponse) error) error {
	if proto.Size(wr) < maxBytes || len(wr.Events) < 2 {
		return send(wr)
	}
	idx := 0
	for {
		cur := copyWatchResponse(wr)
		cur.Fragment = true
		cur.Events = make([]*mvccpb.Event, 0)
		for _, ev := range wr.Events[idx:] {
			cur.Events = append(cur.Events, ev)
			if len(cur.Events) > 1 && proto.Size(cur) >= maxBytes {
				cur.Events = cur.Events[:len(cur.Events)-1]
				break
			}
			idx++
		}
		if idx == len(wr.Events) {
			cur.Fragment = false
		}
		if err := send(cur); err != nil {
			return err
		}
		if !cur.Fragment {
			return nil
		}
	}
}
