package storetest

import (
	"errors"
	"slices"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"

	"github.com/kite-db/kite/pkg/mvcc"
)

// checkAll checks every read the Store serves against the model: ranges at
// every revision it holds and at the ones it does not, latest gets, lists
// read page by page, read-only txns, watches from history, leases and
// hashes. thorough reads more at each revision (the end of a run).
func (h *harness) checkAll(thorough bool) {
	h.t.Helper()
	h.stats.checks++
	h.checkRevisions()
	h.checkPending()
	h.checkRanges(thorough)
	h.checkRangeErrors()
	h.checkLatest()
	h.checkPages()
	h.checkReadTxns(thorough)
	h.checkWatches(thorough)
	h.checkLeases()
	h.checkHashes(thorough)
}

// read sends a Range to the Store and compares its answer with the
// model's; it returns the answer (nil for an error both agree on).
func (h *harness) read(r *pb.RangeRequest) *pb.RangeResponse {
	h.t.Helper()
	got, err := h.call(r)
	want, wantErr := h.m.rangeAt(r)
	h.expect(r, got, err, want, wantErr)
	h.stats.reads++
	if err != nil {
		return nil
	}
	return got.(*pb.RangeResponse)
}

// checkRanges reads the whole key space at every revision from the
// compacted one to the current one, and random ranges at each.
func (h *harness) checkRanges(thorough bool) {
	h.t.Helper()
	per := 2
	if thorough {
		per = 8
	}
	for rev := max(h.m.compacted, 1); rev <= h.m.current; rev++ {
		h.read(&pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, Revision: rev})
		for range per {
			h.read(h.g.rangeReq(rev))
		}
	}
	for range per {
		h.read(h.g.rangeReq(0))
	}
}

// checkRangeErrors reads past the current revision and below the
// compacted one, which etcd refuses.
func (h *harness) checkRangeErrors() {
	h.t.Helper()
	h.read(h.g.rangeReq(h.m.current + 1))
	h.read(h.g.rangeReq(h.m.current + 2 + h.rng.Int64N(100)))
	if h.m.compacted > 1 {
		h.read(h.g.rangeReq(h.m.compacted - 1))
		h.read(h.g.rangeReq(1 + h.rng.Int64N(h.m.compacted-1)))
	}
}

// checkLatest gets every key at the latest revision, the commonest request
// and the one a Store serves on a path of its own.
func (h *harness) checkLatest() {
	h.t.Helper()
	for _, k := range append(slices.Clone(h.g.keys), missing...) {
		r := h.g.rangeReq(0)
		r.Key, r.RangeEnd, r.CountOnly = []byte(k), nil, false
		h.read(r)
	}
}

// checkPages walks lists page by page at a fixed revision, as
// kube-apiserver and etcdctl do, each page starting after the last key of
// the one before, which a Store may read ahead. Some walks stop part way;
// their next page is asked for at the next check, after more writes and
// maybe a compaction, when a page read ahead must not be served in place
// of the answer.
func (h *harness) checkPages() {
	h.t.Helper()
	for range 2 {
		key, end := h.g.selector([5]int{selPrefix: 2, selInterval: 1, selFromKey: 1, selAll: 2})
		rev := h.g.readRev()
		if rev == 0 {
			rev = h.m.current
		}
		r := &pb.RangeRequest{Key: key, RangeEnd: end, Revision: rev, Limit: 1 + h.rng.Int64N(3), KeysOnly: h.g.chance(0.3)}
		stop := -1
		if h.g.chance(0.4) {
			stop = 1 + h.rng.IntN(4)
		}
		for page := 0; ; page++ {
			if page == stop {
				h.pending = append(h.pending, r)
				break
			}
			resp := h.read(r)
			if !resp.More {
				break
			}
			next := proto.Clone(r).(*pb.RangeRequest)
			next.Key = mvcc.KeyAfter(resp.Kvs[len(resp.Kvs)-1].Key)
			r = next
		}
	}
}

func (h *harness) checkPending() {
	h.t.Helper()
	for _, r := range h.pending {
		h.read(r)
	}
	h.pending = nil
}

// checkReadTxns sends txns made of compares and ranges only, which a Store
// answers from a read snapshot instead of its write path.
func (h *harness) checkReadTxns(thorough bool) {
	h.t.Helper()
	n := 3
	if thorough {
		n = 12
	}
	for range n {
		t := h.g.txn(0, true)
		got, err := h.call(t)
		want, wantErr := h.m.txn(t)
		h.expect(t, got, err, want, wantErr)
		h.stats.reads++
	}
}

// checkLeases: the leases listed and each one's keys are the model's. The
// time left is only bounded: leases are long, and a Store that restarted
// gives each its whole TTL again, as etcd does.
func (h *harness) checkLeases() {
	h.t.Helper()
	got, err := h.call(&pb.LeaseLeasesRequest{})
	if err != nil {
		h.fatalf("LeaseLeases: %v", err)
	}
	list := got.(*pb.LeaseLeasesResponse)
	var ids, want []int64
	for _, l := range list.Leases {
		ids = append(ids, l.ID)
	}
	for id := range h.m.leases {
		want = append(want, id)
	}
	// etcd lists leases in no particular order.
	slices.Sort(ids)
	slices.Sort(want)
	if !slices.Equal(ids, want) || list.GetHeader().GetRevision() != h.m.current {
		h.fatalf("LeaseLeases = %v at revision %d; the model has %v at %d", ids, list.GetHeader().GetRevision(), want, h.m.current)
	}
	for _, id := range want {
		req := &pb.LeaseTimeToLiveRequest{ID: id, Keys: true}
		got, err := h.call(req)
		if err != nil {
			h.fatalf("%s: %v", describe(req), err)
		}
		ttl := got.(*pb.LeaseTimeToLiveResponse)
		var keys []string
		for _, k := range ttl.Keys {
			keys = append(keys, string(k))
		}
		slices.Sort(keys) // etcd's order is its lease's map's
		granted := h.m.leases[id]
		if ttl.ID != id || ttl.GrantedTTL != granted || ttl.TTL <= 0 || ttl.TTL > granted ||
			!slices.Equal(keys, h.m.leaseKeys(id)) || ttl.GetHeader().GetRevision() != h.m.current {
			h.fatalf("%s = %s\nthe model has granted TTL %d, keys %q, revision %d", describe(req), text(ttl), granted, h.m.leaseKeys(id), h.m.current)
		}
	}
	req := &pb.LeaseTimeToLiveRequest{ID: h.g.unknownLease(), Keys: true}
	if got, err := h.call(req); !errors.Is(err, mvcc.ErrLeaseNotFound) {
		h.fatalf("%s of a lease that does not exist answered %s; want %v", describe(req), answer(got, err), mvcc.ErrLeaseNotFound)
	}
}
