package raftsql

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"

	"github.com/kite-db/kite/pkg/mvcc"
)

// TestPackEncoding: a packed entry gives back its requests in order, an
// entry of one request is read as etcd writes it, and a packed entry cut
// short is an error, not fewer requests.
func TestPackEncoding(t *testing.T) {
	var pack []*proposal
	var want []*pb.InternalRaftRequest
	for i := range 3 {
		r := &pb.InternalRaftRequest{Header: &pb.RequestHeader{ID: uint64(i + 1)},
			Put: &pb.PutRequest{Key: []byte(fmt.Sprintf("k%d", i)), Value: bytes.Repeat([]byte{'v'}, i*200)}}
		data, err := proto.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if data[0] == packMagic {
			t.Fatalf("a marshaled request begins with the pack marker")
		}
		pack, want = append(pack, &proposal{data: data}), append(want, r)
	}
	data := encodePack(pack)
	got, err := decodeEntry(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("decoded %d requests, want %d", len(got), len(want))
	}
	for i := range want {
		if !proto.Equal(got[i], want[i]) {
			t.Errorf("request %d: got %v, want %v", i, got[i], want[i])
		}
	}
	one, err := decodeEntry(pack[1].data)
	if err != nil || len(one) != 1 || !proto.Equal(one[0], want[1]) {
		t.Errorf("an entry of one request: got %v, %v", one, err)
	}
	if _, err := decodeEntry(data[:len(data)-1]); err == nil {
		t.Error("a truncated packed entry decoded")
	}
}

// TestPackedEntryApplies: the requests of one packed entry are applied in
// one transaction at one index, each with its own outcome; one refused for
// a limit every member hits alike (too many changes in one revision) fails
// alone and changes nothing, and a restart replays none of them twice.
func TestPackedEntryApplies(t *testing.T) {
	for _, behind := range []bool{false, true} {
		t.Run(fmt.Sprintf("apply behind %v", behind), func(t *testing.T) { testPackedEntryApplies(t, behind) })
	}
}

func testPackedEntryApplies(t *testing.T, behind bool) {
	ctx := context.Background()
	cfg := oneMember(t.TempDir())
	cfg.PackProposals, cfg.ApplyBehind = true, behind
	cfg.SQLite.MaxChangesPerRevision = 2
	n, s := openPackMember(t, cfg)

	before := n.applied.Load()
	put := func(k string) *pb.InternalRaftRequest {
		return &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte(k), Value: []byte("v-" + k)}}
	}
	tooMany := &pb.InternalRaftRequest{Txn: &pb.TxnRequest{Success: []*pb.RequestOp{
		{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("b"), Value: []byte("x")}}},
		{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("c"), Value: []byte("x")}}},
		{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("d"), Value: []byte("x")}}},
	}}}
	outcomes := proposeTogether(t, n, put("a"), tooMany, put("e"))
	waitApplied(t, n)
	if got := n.applied.Load() - before; got != 1 {
		t.Errorf("three requests took %d entries, want 1", got)
	}
	for i, want := range []int64{3, 0, 4} { // revision 2 is openPackMember's
		o := outcomes[i]
		if want == 0 {
			if !errors.Is(o.Err, mvcc.ErrTooManyChanges) {
				t.Errorf("request %d: got %v, %v; want ErrTooManyChanges", i, o.Resp, o.Err)
			}
			continue
		}
		r, ok := o.Resp.(*pb.PutResponse)
		if o.Err != nil || !ok || r.GetHeader().GetRevision() != want {
			t.Errorf("request %d: got %v, %v; want a put at revision %d", i, o.Resp, o.Err, want)
		}
	}
	check := func(s *mvcc.Store, rev int64) {
		t.Helper()
		r, err := s.Range(ctx, &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z")})
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, kv := range r.Kvs {
			keys = append(keys, string(kv.Key))
		}
		if fmt.Sprint(keys) != "[a e]" || r.Header.Revision != rev {
			t.Errorf("after the packed entry: keys %v at revision %d, want [a e] at %d", keys, r.Header.Revision, rev)
		}
	}
	check(s, 4)

	// Restarted from its WAL and SQLite file, the member applies nothing
	// again: the entry's index was recorded with its rows.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	_, s = openPackMember(t, cfg)
	check(s, 5) // openPackMember's put again, and nothing else
}

// openPackMember starts a single-member cluster from cfg with a Store over
// it, and waits until it leads.
func openPackMember(t *testing.T, cfg Config) (*Node, *mvcc.Store) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	s, err := mvcc.Open(ctx, n, mvcc.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	for n.lead.Load() != n.id {
		if ctx.Err() != nil {
			t.Fatal("the member did not become leader")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The first write waits for the member's attributes and the new
	// leader's empty entry to be applied ahead of it.
	if _, err := s.Put(ctx, &pb.PutRequest{Key: []byte("0"), Value: []byte("first")}); err != nil {
		t.Fatal(err)
	}
	waitApplied(t, n)
	return n, s
}

// waitApplied waits until n has applied all it committed. A write's waiter
// hears its outcome just before the applied index moves past it, so a test
// counting entries by the index waits for the index too.
func waitApplied(t *testing.T, n *Node) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for n.applied.Load() < n.committed.Load() {
		if time.Now().After(deadline) {
			t.Fatal("the member did not apply what it committed")
		}
		time.Sleep(time.Millisecond)
	}
}

// proposeTogether proposes reqs as one packed entry, as the packer does
// with requests queued together, and returns each one's outcome.
func proposeTogether(t *testing.T, n *Node, reqs ...*pb.InternalRaftRequest) []mvcc.Outcome {
	t.Helper()
	pack := make([]*proposal, len(reqs))
	waits := make([]<-chan mvcc.Outcome, len(reqs))
	for i, r := range reqs {
		id := n.ids.next()
		r.Header = &pb.RequestHeader{ID: id}
		data, err := proto.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		waits[i] = n.waits.register(id)
		pack[i] = &proposal{data: data, errc: make(chan error, 1)}
	}
	n.proposePack(pack)
	outcomes := make([]mvcc.Outcome, len(reqs))
	for i := range reqs {
		if err := <-pack[i].errc; err != nil {
			t.Fatalf("propose: %v", err)
		}
		select {
		case outcomes[i] = <-waits[i]:
		case <-time.After(30 * time.Second):
			t.Fatalf("request %d was not applied", i)
		}
	}
	return outcomes
}
