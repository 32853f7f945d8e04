package test

import (
	"fmt"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// A wstep is one action of a watch scenario, done on etcd then on kite.
type wstep struct {
	name     string
	create   *pb.WatchCreateRequest // answer compared exactly
	cancel   *int64                 // answer compared exactly
	write    any                    // a KV/lease request, answers compared
	progress bool                   // RequestProgress: the answer compared exactly
	exact    bool                   // collect: responses compared one by one per watch
	flat     bool                   // collect: events compared, grouping free
	raw      int                    // read this many responses, compared exactly
	pause    time.Duration
}

func id(n int64) *int64 { return &n }

func runWatch(t *testing.T, p *pair, steps []wstep) {
	t.Helper()
	ws := []*wstream{openWatch(t, p.etcd.server), openWatch(t, p.kite.server)}
	for i, st := range steps {
		fail := func(format string, args ...any) {
			t.Fatalf("step %d %q: %s", i, st.name, fmt.Sprintf(format, args...))
		}
		switch {
		case st.write != nil:
			if !p.same(st.name, st.write) {
				t.FailNow()
			}
		case st.create != nil, st.cancel != nil, st.progress, st.raw > 0:
			var got [2][]*pb.WatchResponse
			for j, w := range ws {
				var r *pb.WatchResponse
				var err error
				switch {
				case st.create != nil:
					r, err = w.create(st.create)
				case st.cancel != nil:
					r, err = w.cancel(*st.cancel)
				case st.progress:
					if err = w.send(progressRequest()); err == nil {
						r, err = w.nextNonStray(15 * time.Second)
					}
				default:
					for range st.raw {
						if r, err = w.nextNonStray(15 * time.Second); err != nil {
							break
						}
						got[j] = append(got[j], r)
					}
					r = nil
				}
				if err != nil {
					fail("%v (etcd got %s)", err, showAll(got[0]))
				}
				if r != nil {
					got[j] = append(got[j], r)
				}
			}
			if d := compareExact(got[0], got[1]); d != "" {
				fail("request %s\netcd: %s\nkite: %s\n%s", show(st.create), showAll(got[0]), showAll(got[1]), d)
			}
		case st.exact, st.flat:
			var got [2][]*pb.WatchResponse
			var sync [2]*pb.WatchResponse
			for j, w := range ws {
				rs, pr, err := w.collect()
				if err != nil {
					fail("%v", err)
				}
				got[j], sync[j] = rs, pr
			}
			d := ""
			if st.exact {
				d = compareExact(got[0], got[1])
			} else {
				d = compareFlat(got[0], got[1])
			}
			if d == "" {
				d = diffResults(sync[0], sync[1], nil, nil)
			}
			if d != "" {
				fail("etcd: %s\nkite: %s\n%s", showAll(got[0]), showAll(got[1]), d)
			}
		case st.pause > 0:
			time.Sleep(st.pause)
		}
	}
}

func wcreate(key, end string, start int64) *pb.WatchCreateRequest {
	return &pb.WatchCreateRequest{Key: bs(key), RangeEnd: bs(end), StartRevision: start}
}

func TestDiffWatchLive(t *testing.T) {
	p := newPair(t)
	withPrev := wcreate("a", prefixEnd("a"), 0)
	withPrev.PrevKv = true
	noPut := wcreate("b", "", 0)
	noPut.Filters = []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NOPUT}
	noDelete := wcreate("\x00", "\x00", 0)
	noDelete.Filters = []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NODELETE}
	both := wcreate("a", "c", 0)
	both.Filters = []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NODELETE, pb.WatchCreateRequest_NOPUT}
	given := wcreate("c", "", 0)
	given.WatchId = 42
	runWatch(t, p, []wstep{
		{name: "seed", write: put("a0", "0")},
		{name: "prefix a prev_kv", create: withPrev},
		{name: "key b NOPUT", create: noPut},
		{name: "all NODELETE", create: noDelete},
		{name: "both filters", create: both},
		{name: "given id 42", create: given},
		{name: "duplicate id 42", create: given},
		{name: "empty key", create: wcreate("", "", 0)},
		{name: "from key", create: wcreate("b", "\x00", 0)},
		{name: "negative start", create: wcreate("a", "", -1)},
		{name: "put a1", write: put("a1", "1")},
		{name: "put b", write: put("b", "1")},
		{name: "txn", write: txn(nil, ops(opPut(put("a2", "2")), opPut(put("a1", "11")), opDel(del("b", "")), opPut(put("c", "c"))), nil)},
		{name: "delete a prefix", write: &pb.DeleteRangeRequest{Key: bs("a"), RangeEnd: bs(prefixEnd("a"))}},
		{name: "delete missing", write: del("zz", "")},
		{name: "put b again", write: put("b", "2")},
		{name: "delete b", write: del("b", "")},
		{name: "live events", exact: true},
		{name: "request progress", progress: true},
		{name: "cancel 0", cancel: id(0)},
		{name: "put after cancel", write: put("a3", "3")},
		{name: "after cancel", exact: true},
		{name: "cancel 42", cancel: id(42)},
		{name: "cancel unknown", write: put("c", "again")},
		{name: "after cancel 42", exact: true},
		{name: "progress again", progress: true},
	})
}

func TestDiffWatchHistory(t *testing.T) {
	p := newPair(t)
	var steps []wstep
	for i := range 20 {
		steps = append(steps, wstep{name: fmt.Sprintf("put %d", i), write: put(fmt.Sprintf("k%d", i%5), fmt.Sprint(i))})
		if i%4 == 3 {
			steps = append(steps, wstep{name: fmt.Sprintf("txn %d", i), write: txn(nil, ops(
				opPut(put(fmt.Sprintf("k%d", i%5), "t")), opDel(del(fmt.Sprintf("k%d", (i+1)%5), "")), opPut(put("x", fmt.Sprint(i)))), nil)})
		}
	}
	fromTwo := wcreate("\x00", "\x00", 2)
	fromTwo.PrevKv = true
	prefix := wcreate("k", prefixEnd("k"), 5)
	prefix.PrevKv = true
	prefix.Filters = []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NOPUT}
	// At the compacted revision itself the event's previous revision is
	// gone: etcd sends no prev_kv, and kube-apiserver relies on that.
	atCompactPrev := wcreate("\x00", "\x00", 10)
	atCompactPrev.PrevKv = true
	steps = append(steps, []wstep{
		{name: "replay all from 2 prev_kv", create: fromTwo},
		{name: "replay k prefix from 5 NOPUT", create: prefix},
		{name: "replay single key from 1", create: wcreate("k3", "", 1)},
		{name: "replay x from 10", create: wcreate("x", "", 10)},
		{name: "replay from current", create: wcreate("\x00", "\x00", 26)},
		{name: "history", flat: true},
		{name: "write after replay", write: txn(nil, ops(opPut(put("k1", "after")), opPut(put("x", "after"))), nil)},
		{name: "live after replay", exact: true},
		{name: "compact 10", write: &pb.CompactionRequest{Revision: 10, Physical: true}},
		{name: "compacted start", create: wcreate("k", prefixEnd("k"), 5)},
		{name: "compacted answer", raw: 1},
		// etcd keeps the compacted watcher on the stream (RequestProgress
		// stays unanswered) until the client cancels it.
		{name: "cancel compacted watcher", cancel: id(5)},
		{name: "start at compact rev", create: wcreate("k", prefixEnd("k"), 10)},
		{name: "start at compact rev prev_kv", create: atCompactPrev},
		{name: "start after compact", create: wcreate("\x00", "\x00", 11)},
		{name: "after compaction", flat: true},
		{name: "future start", create: wcreate("\x00", "\x00", 30)},
		{name: "put 28", write: put("f", "28")},
		{name: "put 29", write: put("f", "29")},
		{name: "put 30", write: put("f", "30")},
		{name: "put 31", write: put("g", "31")},
		{name: "future events", exact: true},
	}...)
	runWatch(t, p, steps)
}

func TestDiffWatchProgressNotify(t *testing.T) {
	p := newPair(t, "--watch-progress-notify-interval=1s")
	notify := wcreate("p", "", 0)
	notify.ProgressNotify = true
	runWatch(t, p, []wstep{
		{name: "put", write: put("q", "1")},
		{name: "watch p progress_notify", create: notify},
		{name: "put other key", write: put("q", "2")},
		{name: "first notification", raw: 1},
		{name: "put p", write: put("p", "1")},
		{name: "event", raw: 1},
		{name: "put other key again", write: put("q", "3")},
		{name: "next notification", raw: 1},
	})
}

func TestDiffWatchFragment(t *testing.T) {
	p := newPair(t)
	big := func(c byte) string { return bigValue(700*1024, c) }
	frag := wcreate("a", prefixEnd("a"), 0)
	frag.PrevKv, frag.Fragment = true, true
	whole := wcreate("a", prefixEnd("a"), 0)
	whole.PrevKv = true
	catchup := wcreate("a", prefixEnd("a"), 2)
	catchup.Fragment = true
	runWatch(t, p, []wstep{
		{name: "put a1", write: put("a1", big('x'))},
		{name: "put a2", write: put("a2", big('y'))},
		{name: "watch fragment prev_kv", create: frag},
		{name: "watch whole prev_kv", create: whole},
		{name: "txn two big puts", write: txn(nil, ops(opPut(put("a1", big('z'))), opPut(put("a2", big('w')))), nil)},
		{name: "fragments", exact: true},
		{name: "catch-up with fragment", create: catchup},
		{name: "catch-up events", flat: true},
	})
}

// TestDiffWatchEventKinds: events from leases (revoke deletes), ignore_value
// puts, empty values and nested txns, with prev_kv.
func TestDiffWatchEventKinds(t *testing.T) {
	p := newPair(t)
	prev := wcreate("\x00", "\x00", 0)
	prev.PrevKv = true
	runWatch(t, p, []wstep{
		{name: "watch all prev_kv", create: prev},
		{name: "grant", write: &pb.LeaseGrantRequest{ID: 9, TTL: 600}},
		{name: "put leased", write: putLease("l1", "1", 9)},
		{name: "put leased 2", write: putLease("l2", "2", 9)},
		{name: "ignore_value", write: &pb.PutRequest{Key: bs("l1"), IgnoreValue: true, IgnoreLease: true}},
		{name: "revoke", write: &pb.LeaseRevokeRequest{ID: 9}},
		{name: "empty value", write: put("e", "")},
		{name: "nested txn", write: txn(nil, ops(opPut(put("n", "1")), opTxn(txn(nil, ops(opPut(put("m", "1")), opDel(del("e", ""))), nil))), nil)},
		{name: "from-key delete then put", write: txn(nil, ops(opDel(del("m", "\x00")), opPut(put("n", "2"))), nil)},
		{name: "events", exact: true},
	})
}
