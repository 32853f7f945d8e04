package server

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
)

// TestWatchResponseFieldCount fails when WatchResponse gains a field, so
// that copyWatchResponse (and with it sendFragments) is updated too.
func TestWatchResponseFieldCount(t *testing.T) {
	if got, want := (&pb.WatchResponse{}).ProtoReflect().Descriptor().Fields().Len(), 8; got != want {
		t.Fatalf("WatchResponse has %d fields, copyWatchResponse copies %d", got, want)
	}
}

func event(key string, size int) *mvccpb.Event {
	return &mvccpb.Event{Kv: &mvccpb.KeyValue{Key: []byte(key), Value: make([]byte, size), ModRevision: 5}}
}

func TestSendFragments(t *testing.T) {
	hdr := &pb.ResponseHeader{Revision: 5, MemberId: 2}
	for _, tt := range []struct {
		name      string
		events    int
		size      int
		maxBytes  int
		wantSends int
	}{
		{"small", 3, 10, 1000, 1},
		{"single big event is never split", 1, 5000, 1000, 1},
		{"split", 10, 300, 1000, 4},
		{"each alone", 4, 2000, 1000, 4},
	} {
		t.Run(tt.name, func(t *testing.T) {
			wr := &pb.WatchResponse{Header: hdr, WatchId: 7}
			for i := range tt.events {
				wr.Events = append(wr.Events, event(string(rune('a'+i)), tt.size))
			}
			var sent []*pb.WatchResponse
			err := sendFragments(wr, tt.maxBytes, func(r *pb.WatchResponse) error {
				sent = append(sent, r)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(sent) != tt.wantSends {
				t.Fatalf("%d sends, want %d", len(sent), tt.wantSends)
			}
			var n int
			for i, r := range sent {
				if r.WatchId != 7 || r.Header != hdr {
					t.Errorf("fragment %d lost watch ID or header: %v", i, r)
				}
				if last := i == len(sent)-1; r.Fragment == last {
					t.Errorf("fragment %d: Fragment=%v", i, r.Fragment)
				}
				if len(r.Events) > 1 && proto.Size(r) >= tt.maxBytes {
					t.Errorf("fragment %d has %d bytes", i, proto.Size(r))
				}
				for _, ev := range r.Events {
					if ev != wr.Events[n] {
						t.Fatalf("event %d out of order", n)
					}
					n++
				}
			}
			if n != tt.events {
				t.Fatalf("%d events sent, want %d", n, tt.events)
			}
		})
	}
	boom := errors.New("boom")
	wr := &pb.WatchResponse{Events: []*mvccpb.Event{event("a", 600), event("b", 600)}}
	if err := sendFragments(wr, 1000, func(*pb.WatchResponse) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("send error: got %v", err)
	}
}

// TestWatchFragmentEndToEnd: a delete of ten large keys watched with
// prev_kv makes one response of ~900 KB, over the fragment threshold
// (MaxRequestBytes + 512 KiB, as in etcd), so a watcher that asked for
// fragments gets it in pieces that together hold every event in order.
func TestWatchFragmentEndToEnd(t *testing.T) {
	_, endpoint := mustStartServer(t, Config{MaxRequestBytes: 100 * 1024})
	cli := newClient(t, endpoint)
	ctx := testContext(t)
	for i := range 10 {
		if _, err := cli.Put(ctx, fmt.Sprintf("f/%d", i), strings.Repeat("x", 90*1024)); err != nil {
			t.Fatal(err)
		}
	}
	wc, err := pb.NewWatchClient(cli.ActiveConnection()).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = wc.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{
		Key: []byte("f/"), RangeEnd: []byte("f0"), PrevKv: true, Fragment: true,
	}}})
	if err != nil {
		t.Fatal(err)
	}
	if created, err := wc.Recv(); err != nil || !created.Created {
		t.Fatalf("created: %v %v", created, err)
	}
	if _, err := cli.Delete(ctx, "f/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	var parts, events int
	for {
		wr, err := wc.Recv()
		if err != nil {
			t.Fatal(err)
		}
		parts++
		for _, ev := range wr.Events {
			if want := fmt.Sprintf("f/%d", events); string(ev.Kv.Key) != want || ev.PrevKv == nil {
				t.Fatalf("event %d: key %q prev %v", events, ev.Kv.Key, ev.PrevKv != nil)
			}
			events++
		}
		if !wr.Fragment {
			break
		}
	}
	if parts < 2 || events != 10 {
		t.Fatalf("%d events in %d parts; want 10 in several", events, parts)
	}
}
