package server

import (
	"context"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// The fuzz targets feed arbitrary bytes, decoded as a request, through the
// same path a gRPC call takes (validation, then the store) and only assert
// that nothing panics: whatever a client sends must end in a response or an
// error. Seeds are in testdata/fuzz/. Run with e.g.
//
//	go test ./pkg/server -run '^$' -fuzz FuzzTxnRequest -fuzztime 1m

func FuzzTxnRequest(f *testing.F) {
	kv := &kvServer{store: mustOpenStore(f), hdr: testHeader(), maxTxnOps: DefaultMaxTxnOps, maxRequestBytes: DefaultMaxRequestBytes}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := &pb.TxnRequest{}
		if err := proto.Unmarshal(data, r); err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		start := time.Now()
		resp, err := kv.Txn(ctx, r)
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("txn took %v (err %v): %v", d, err, r)
		}
		if err == nil && resp.GetHeader().GetMemberId() == 0 {
			t.Fatalf("response without a filled header: %v", resp)
		}
	})
}

func FuzzRangeRequest(f *testing.F) {
	store := mustOpenStore(f)
	kv := &kvServer{store: store, hdr: testHeader(), maxTxnOps: DefaultMaxTxnOps, maxRequestBytes: DefaultMaxRequestBytes}
	// Some keys so that ranges, limits and chunking have something to walk.
	for _, k := range []string{"a", "a1", "a2", "b", "c", "z"} {
		if _, err := kv.Put(context.Background(), &pb.PutRequest{Key: []byte(k), Value: []byte(k)}); err != nil {
			f.Fatalf("put %s: %v", k, err)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := &pb.RangeRequest{}
		if err := proto.Unmarshal(data, r); err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		stream := &fakeRangeStream{ctx: ctx}
		if _, err := kv.Range(ctx, proto.CloneOf(r)); err != nil {
			return // Range refused it; RangeStream would too.
		}
		if err := kv.RangeStream(r, stream); err == nil {
			last := stream.sent[len(stream.sent)-1].RangeResponse
			if last.GetHeader() == nil {
				t.Fatalf("last RangeStream chunk has no header")
			}
		}
	})
}

// testHeader is a header filler with fixed IDs.
func testHeader() *header {
	rev := func() int64 { return 0 }
	one := &singleMember{member: &pb.Member{ID: 2}, counts: &proposalCounts{}, rev: rev}
	return &header{clusterID: 1, memberID: 2, cluster: one, rev: rev}
}

// fakeRangeStream collects what RangeStream sends.
type fakeRangeStream struct {
	grpc.ServerStream
	ctx  context.Context
	sent []*pb.RangeStreamResponse
}

func (s *fakeRangeStream) Context() context.Context { return s.ctx }

func (s *fakeRangeStream) Send(r *pb.RangeStreamResponse) error {
	s.sent = append(s.sent, r)
	return nil
}
