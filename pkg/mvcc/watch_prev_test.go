package mvcc_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"

	"github.com/kite-db/kite/pkg/drivers/sqlite"
	"github.com/kite-db/kite/pkg/mvcc"
)

// watchEvents watches every key from rev with prev_kv and returns the first
// n events.
func watchEvents(t *testing.T, s *mvcc.Store, rev int64, n int, during func()) []*mvccpb.Event {
	t.Helper()
	ws := s.NewWatchStream()
	defer ws.Close()
	ws.Watch(&pb.WatchCreateRequest{Key: []byte{0}, RangeEnd: []byte{0}, StartRevision: rev, PrevKv: true})
	var evs []*mvccpb.Event
	deadline := time.After(10 * time.Second)
	created := false
	for len(evs) < n {
		select {
		case r := <-ws.Responses():
			if r.Canceled {
				t.Fatalf("watch canceled: %v", r)
			}
			evs = append(evs, r.Events...)
			if r.Created && !created {
				created = true
				if during != nil {
					during()
				}
			}
		case <-deadline:
			t.Fatalf("%d of %d events within 10 s: %v", len(evs), n, evs)
		}
	}
	return evs
}

// TestStore_WatchPrevKVIsTheRevisionBefore checks the prev_kv of the events
// of txns that change a key more than once in one revision, with from-key
// deletes, which etcd's txn check lets overlap the txn's puts: put then
// delete; delete then put; delete, put and delete again. etcd's server
// reads an event's prev_kv as the key at the revision before the event
// (none for a put that creates its key), so every event of a key in a
// revision has the value from before the txn, never the txn's own put. The
// watch is checked live and, after a restart that leaves the hub's memory
// empty, from the log.
func TestStore_WatchPrevKVIsTheRevisionBefore(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openStore(t, dir, mvcc.Config{})
	put(t, s, "k", "k-old", 0)
	put(t, s, "m", "m-old", 0)
	put(t, s, "q", "q-old", 0)
	before, _ := s.Revisions()

	putOp := func(k, v string) *pb.RequestOp {
		return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(k), Value: []byte(v)}}}
	}
	delFrom := func(k string) *pb.RequestOp {
		return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte(k), RangeEnd: []byte{0}}}}
	}
	txns := []*pb.TxnRequest{
		{Success: []*pb.RequestOp{putOp("k", "k-new"), putOp("n", "n-new"), delFrom("k"), putOp("q", "q-new")}},
		{Success: []*pb.RequestOp{delFrom("q"), putOp("q", "q-2"), delFrom("q")}},
	}
	type want struct {
		txn      int
		typ      mvccpb.Event_EventType
		key, val string
		prev     string // "" for none
	}
	wants := []want{
		{0, mvccpb.PUT, "k", "k-new", "k-old"},
		{0, mvccpb.PUT, "n", "n-new", ""},
		{0, mvccpb.DELETE, "k", "", "k-old"},
		{0, mvccpb.DELETE, "m", "", "m-old"},
		{0, mvccpb.DELETE, "n", "", ""},
		{0, mvccpb.DELETE, "q", "", "q-old"},
		{0, mvccpb.PUT, "q", "q-new", ""},
		{1, mvccpb.DELETE, "q", "", "q-new"},
		{1, mvccpb.PUT, "q", "q-2", ""},
		{1, mvccpb.DELETE, "q", "", "q-new"},
	}
	revs := make([]int64, len(txns))
	check := func(how string, evs []*mvccpb.Event) {
		t.Helper()
		if len(evs) != len(wants) {
			t.Fatalf("%s: %d events, want %d: %v", how, len(evs), len(wants), evs)
		}
		for i, ev := range evs {
			w := wants[i]
			rev := revs[w.txn]
			if ev.Type != w.typ || string(ev.Kv.Key) != w.key || string(ev.Kv.Value) != w.val || ev.Kv.ModRevision != rev {
				t.Fatalf("%s: event %d is %v, want %v %s=%q at %d", how, i, ev, w.typ, w.key, w.val, rev)
			}
			// etcd's definition: the key at the revision before, unless
			// the event creates the key.
			var prev *mvccpb.KeyValue
			if ev.Type == mvccpb.DELETE || ev.Kv.CreateRevision != ev.Kv.ModRevision {
				r, err := s.Range(ctx, &pb.RangeRequest{Key: ev.Kv.Key, Revision: rev - 1})
				if err != nil {
					t.Fatal(err)
				}
				if len(r.Kvs) > 0 {
					prev = r.Kvs[0]
				}
			}
			if !proto.Equal(ev.PrevKv, prev) || (w.prev == "") != (ev.PrevKv == nil) ||
				ev.PrevKv != nil && string(ev.PrevKv.Value) != w.prev {
				t.Fatalf("%s: event %d (%v %s) has prev_kv %v, want %v (%q)", how, i, ev.Type, ev.Kv.Key, ev.PrevKv, prev, w.prev)
			}
		}
	}

	live := watchEvents(t, s, 0, len(wants), func() {
		for i, txn := range txns {
			resp, err := s.Txn(ctx, txn)
			if err != nil {
				t.Fatal(err)
			}
			if !resp.Succeeded {
				t.Fatalf("txn %d failed", i)
			}
			revs[i] = resp.Header.Revision
			if revs[i] != before+1+int64(i) {
				t.Fatalf("txn %d at revision %d, want %d", i, revs[i], before+1+int64(i))
			}
		}
	})
	check("live", live)

	closeStore(t, s)
	b, err := sqlite.Open(ctx, filepath.Join(dir, "kite.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rec := &historyRecorder{Backend: b}
	if s, err = mvcc.Open(ctx, rec, mvcc.Config{}); err != nil {
		b.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(); b.Close() })
	check("from the log", watchEvents(t, s, revs[0], len(wants), nil))
	if rec.reads.Load() == 0 {
		t.Fatal("the events were not read from the log; the check above proved nothing")
	}
}
