package server

import (
	"encoding/binary"
	"fmt"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// A revision's events go to every watcher of their range, each in a
// response of its own (it carries the watcher's ID), and gRPC's codec
// marshals every response from scratch, keys and values included: with
// 1,000 watchers on one prefix that was a quarter of kite's CPU in
// kite-bench's watch workload. The store shares one KeyValue between all
// the events of a change, so its encoding can be shared too: a watch
// response is encoded here, its own fields by proto and each event framed
// around its KeyValues' shared encodings, and handed to gRPC already
// encoded. The bytes are the ones proto.Marshal gives (fields in number
// order, events last), which TestWatchResponseEncodingMatchesProto checks.

// preEncoded is a message already in protobuf wire form.
type preEncoded struct{ data mem.BufferSlice }

// passThroughCodec is gRPC's proto codec, except that a preEncoded message
// is sent as it is.
type passThroughCodec struct{ encoding.CodecV2 }

func newPassThroughCodec() passThroughCodec {
	return passThroughCodec{encoding.GetCodecV2("proto")}
}

func (c passThroughCodec) Marshal(v any) (mem.BufferSlice, error) {
	if p, ok := v.(*preEncoded); ok {
		return p.data, nil
	}
	return c.CodecV2.Marshal(v)
}

// kvEncodingBytes bounds the shared encodings kept: a revision's events
// reach all their watchers within moments, so the newest few MiB are what
// gets reused.
const kvEncodingBytes = 4 << 20

// kvEncodings keeps the wire form of recently sent KeyValues, keyed by
// pointer. The store never changes a KeyValue it has published, and a
// pointer held as a map key keeps its KeyValue alive, so a key always
// names the same contents.
type kvEncodings struct {
	mu    sync.Mutex
	byKV  map[*mvccpb.KeyValue][]byte
	order []*mvccpb.KeyValue // insertion order; the oldest is evicted first
	bytes int
}

func newKVEncodings() *kvEncodings {
	return &kvEncodings{byKV: make(map[*mvccpb.KeyValue][]byte)}
}

func (c *kvEncodings) get(kv *mvccpb.KeyValue) ([]byte, error) {
	c.mu.Lock()
	b, ok := c.byKV[kv]
	c.mu.Unlock()
	if ok {
		return b, nil
	}
	b, err := proto.Marshal(kv)
	if err != nil {
		return nil, fmt.Errorf("encode key-value: %w", err)
	}
	if len(b) > kvEncodingBytes/4 {
		return b, nil // a huge value would push out everything else
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.byKV[kv]; !ok {
		c.byKV[kv] = b
		c.order = append(c.order, kv)
		c.bytes += len(b)
		for c.bytes > kvEncodingBytes {
			old := c.order[0]
			c.order[0] = nil
			c.order = c.order[1:]
			c.bytes -= len(c.byKV[old])
			delete(c.byKV, old)
		}
	}
	return b, nil
}

// Field numbers of etcd's WatchResponse and Event (rpc.proto, kv.proto).
const (
	watchResponseEvents protowire.Number = 11
	eventType           protowire.Number = 1
	eventKV             protowire.Number = 2
	eventPrevKV         protowire.Number = 3
)

// encodeWatchResponse returns wr in wire form as the pieces gRPC writes
// out one after another: the response's own fields and each event's framing
// written here (in field-number order, with proto's rules: zero values left
// out, a present message written even when empty), and each event's
// KeyValues as their shared encodings from enc, not copied.
func encodeWatchResponse(wr *pb.WatchResponse, enc *kvEncodings) (mem.BufferSlice, error) {
	var hdrSize int
	size := sizeVarintField(2, uint64(wr.WatchId)) + sizeBoolField(3, wr.Created) + sizeBoolField(4, wr.Canceled) +
		sizeVarintField(5, uint64(wr.CompactRevision)) + sizeBoolField(7, wr.Fragment)
	if wr.Header != nil {
		hdrSize = sizeHeader(wr.Header)
		size += protowire.SizeTag(1) + protowire.SizeBytes(hdrSize)
	}
	if wr.CancelReason != "" {
		size += protowire.SizeTag(6) + protowire.SizeBytes(len(wr.CancelReason))
	}
	// Each event adds its framing to the small buffer and up to two shared
	// pieces; a piece follows the framing written before it.
	// At most: three tags of one byte, the event's length, its type and
	// two KeyValue lengths (varints of at most 10 bytes).
	const maxFraming = 3 + 4*binary.MaxVarintLen64
	small := make([]byte, 0, size+len(wr.Events)*maxFraming)
	if wr.Header != nil {
		small = protowire.AppendTag(small, 1, protowire.BytesType)
		small = protowire.AppendVarint(small, uint64(hdrSize))
		small = appendHeader(small, wr.Header)
	}
	small = appendVarintField(small, 2, uint64(wr.WatchId))
	small = appendBoolField(small, 3, wr.Created)
	small = appendBoolField(small, 4, wr.Canceled)
	small = appendVarintField(small, 5, uint64(wr.CompactRevision))
	if wr.CancelReason != "" {
		small = protowire.AppendTag(small, 6, protowire.BytesType)
		small = protowire.AppendString(small, wr.CancelReason)
	}
	small = appendBoolField(small, 7, wr.Fragment)
	out := make(mem.BufferSlice, 0, 1+4*len(wr.Events))
	cut := 0 // small[cut:] is not yet in out
	flush := func(shared []byte) {
		out = append(out, mem.SliceBuffer(small[cut:len(small):len(small)]))
		cut = len(small)
		if len(shared) > 0 {
			out = append(out, mem.SliceBuffer(shared))
		}
	}
	for _, ev := range wr.Events {
		var kv, prev []byte
		var err error
		evSize := sizeVarintField(eventType, uint64(ev.Type))
		if ev.Kv != nil {
			if kv, err = enc.get(ev.Kv); err != nil {
				return nil, err
			}
			evSize += protowire.SizeTag(eventKV) + protowire.SizeBytes(len(kv))
		}
		if ev.PrevKv != nil {
			if prev, err = enc.get(ev.PrevKv); err != nil {
				return nil, err
			}
			evSize += protowire.SizeTag(eventPrevKV) + protowire.SizeBytes(len(prev))
		}
		small = protowire.AppendTag(small, watchResponseEvents, protowire.BytesType)
		small = protowire.AppendVarint(small, uint64(evSize))
		small = appendVarintField(small, eventType, uint64(ev.Type))
		if ev.Kv != nil {
			small = protowire.AppendTag(small, eventKV, protowire.BytesType)
			small = protowire.AppendVarint(small, uint64(len(kv)))
			flush(kv)
		}
		if ev.PrevKv != nil {
			small = protowire.AppendTag(small, eventPrevKV, protowire.BytesType)
			small = protowire.AppendVarint(small, uint64(len(prev)))
			flush(prev)
		}
	}
	if cut < len(small) || len(out) == 0 {
		flush(nil)
	}
	return out, nil
}

// sizeHeader is the encoded size of a ResponseHeader.
func sizeHeader(h *pb.ResponseHeader) int {
	return sizeVarintField(1, h.ClusterId) + sizeVarintField(2, h.MemberId) +
		sizeVarintField(3, uint64(h.Revision)) + sizeVarintField(4, h.RaftTerm)
}

// appendHeader encodes a ResponseHeader: cluster_id, member_id, revision,
// raft_term, fields 1 to 4.
func appendHeader(b []byte, h *pb.ResponseHeader) []byte {
	b = appendVarintField(b, 1, h.ClusterId)
	b = appendVarintField(b, 2, h.MemberId)
	b = appendVarintField(b, 3, uint64(h.Revision))
	return appendVarintField(b, 4, h.RaftTerm)
}

func sizeVarintField(n protowire.Number, v uint64) int {
	if v == 0 {
		return 0
	}
	return protowire.SizeTag(n) + protowire.SizeVarint(v)
}

func appendVarintField(b []byte, n protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, n, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func sizeBoolField(n protowire.Number, v bool) int {
	if !v {
		return 0
	}
	return protowire.SizeTag(n) + 1
}

func appendBoolField(b []byte, n protowire.Number, v bool) []byte {
	if !v {
		return b
	}
	return append(protowire.AppendTag(b, n, protowire.VarintType), 1)
}
