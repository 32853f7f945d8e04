package server

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"
)

// Watch responses encoded with shared KeyValue encodings are byte for byte
// what proto.Marshal gives, for every shape a response takes: created and
// canceled answers without events, progress notifications, PUT and DELETE
// events, with and without previous values, empty keys and values, and the
// same KeyValue in several responses.
func TestWatchResponseEncodingMatchesProto(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	enc := newKVEncodings()
	var kvs []*mvccpb.KeyValue
	for i := range 50 {
		kvs = append(kvs, &mvccpb.KeyValue{
			Key:            fmt.Appendf(nil, "/registry/pods/ns/p-%d", i),
			Value:          bytes.Repeat([]byte{byte(i)}, rnd.IntN(3000)),
			CreateRevision: rnd.Int64N(1 << 40),
			ModRevision:    rnd.Int64N(1 << 40),
			Version:        rnd.Int64N(100),
			Lease:          rnd.Int64N(1<<62) - 1<<61,
		})
	}
	kvs = append(kvs, &mvccpb.KeyValue{}, &mvccpb.KeyValue{Key: []byte("k")})
	for i := range 2000 {
		wr := &pb.WatchResponse{
			Header:  &pb.ResponseHeader{ClusterId: rnd.Uint64(), MemberId: rnd.Uint64(), Revision: rnd.Int64N(1 << 40), RaftTerm: rnd.Uint64N(10)},
			WatchId: rnd.Int64N(1000) - 1,
		}
		switch i % 5 {
		case 0:
			wr.Created = true
		case 1:
			wr.Canceled, wr.CancelReason, wr.CompactRevision = true, "mvcc: required revision has been compacted", rnd.Int64N(100)
		case 2:
			wr.Header = nil
		default:
			wr.Fragment = rnd.IntN(2) == 0
			for range rnd.IntN(6) {
				ev := &mvccpb.Event{Kv: kvs[rnd.IntN(len(kvs))]}
				if rnd.IntN(3) == 0 {
					ev.Type = mvccpb.Event_DELETE
				}
				if rnd.IntN(2) == 0 {
					ev.PrevKv = kvs[rnd.IntN(len(kvs))]
				}
				wr.Events = append(wr.Events, ev)
			}
		}
		want, err := proto.Marshal(wr)
		if err != nil {
			t.Fatal(err)
		}
		pieces, err := encodeWatchResponse(wr, enc)
		if err != nil {
			t.Fatal(err)
		}
		if got := pieces.Materialize(); !bytes.Equal(got, want) {
			t.Fatalf("response %d (%v): encoded %x, proto.Marshal %x", i, wr, got, want)
		}
		if pieces.Len() != len(want) {
			t.Fatalf("response %d: pieces of %d bytes, want %d", i, pieces.Len(), len(want))
		}
	}
	if len(enc.byKV) == 0 || enc.bytes > kvEncodingBytes {
		t.Fatalf("shared encodings: %d entries, %d bytes (bound %d)", len(enc.byKV), enc.bytes, kvEncodingBytes)
	}
}

// The shared encodings stay within their byte bound, oldest out first.
func TestKVEncodingsBounded(t *testing.T) {
	enc := newKVEncodings()
	var first *mvccpb.KeyValue
	for i := range 10_000 {
		kv := &mvccpb.KeyValue{Key: fmt.Appendf(nil, "k%d", i), Value: make([]byte, 1024)}
		if i == 0 {
			first = kv
		}
		if _, err := enc.get(kv); err != nil {
			t.Fatal(err)
		}
		if enc.bytes > kvEncodingBytes {
			t.Fatalf("after %d: %d bytes kept, bound %d", i, enc.bytes, kvEncodingBytes)
		}
	}
	if _, ok := enc.byKV[first]; ok {
		t.Fatal("the oldest encoding was not evicted")
	}
	if len(enc.byKV) != len(enc.order) {
		t.Fatalf("%d encodings, %d in the eviction order", len(enc.byKV), len(enc.order))
	}
}

// BenchmarkWatchFanOut encodes one revision's response for 1,000 watchers of
// its key, as gRPC's codec did (proto.Marshal of each) and with the shared
// KeyValue encoding.
func BenchmarkWatchFanOut(b *testing.B) {
	kv := &mvccpb.KeyValue{Key: []byte("/registry/configmaps/ns/cm-1"), Value: make([]byte, 1024), ModRevision: 7, CreateRevision: 3, Version: 2}
	resp := func(id int64) *pb.WatchResponse {
		return &pb.WatchResponse{Header: &pb.ResponseHeader{ClusterId: 1, MemberId: 2, Revision: 7, RaftTerm: 1}, WatchId: id,
			Events: []*mvccpb.Event{{Kv: kv}}}
	}
	b.Run("proto.Marshal", func(b *testing.B) {
		for b.Loop() {
			for id := range int64(1000) {
				if _, err := proto.Marshal(resp(id)); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("shared", func(b *testing.B) {
		enc := newKVEncodings()
		for b.Loop() {
			for id := range int64(1000) {
				if _, err := encodeWatchResponse(resp(id), enc); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
