package mvcc_test

import (
	"context"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"

	"github.com/kite-db/kite/pkg/mvcc"
)

// TestStore_PagesSortedByOtherTargetsAreNotKeyPages pages through a range
// with a limit and a sort target other than the key but no order, which
// etcd reads as ascending by that target over the first limit+1 keys: such
// a page is not a page in key order, so neither its count nor the page
// after it may be carried forward as if it were. The keys are put out of
// key order so that the mod revision order differs from the key order.
func TestStore_PagesSortedByOtherTargetsAreNotKeyPages(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir(), mvcc.Config{})
	for _, k := range []string{"a", "c", "b", "d", "f", "e", "h", "g", "i"} {
		put(t, s, k, "v", 0)
	}
	rev, _ := s.Revisions()

	// etcd's answers: each page is the first three keys of the rest of the
	// range, sorted by mod revision, cut to two.
	want := []struct {
		from  string
		keys  []string
		count int64
	}{
		{"a", []string{"a", "c"}, 9},
		{"c\x00", []string{"d", "f"}, 6},
		{"f\x00", []string{"h", "g"}, 3},
	}
	for _, target := range []pb.RangeRequest_SortTarget{pb.RangeRequest_MOD, pb.RangeRequest_CREATE} {
		for i, w := range want {
			r := &pb.RangeRequest{Key: []byte(w.from), RangeEnd: []byte{0}, Revision: rev, Limit: 2,
				SortTarget: target, SortOrder: pb.RangeRequest_NONE}
			resp, err := s.Range(ctx, r)
			if err != nil {
				t.Fatalf("%v page %d: %v", target, i, err)
			}
			var keys []string
			for _, kv := range resp.Kvs {
				keys = append(keys, string(kv.Key))
			}
			if resp.Count != w.count || !resp.More || len(keys) != 2 || keys[0] != w.keys[0] || keys[1] != w.keys[1] {
				t.Fatalf("%v page %d from %q: keys %q count %d more %v, want %q count %d more true",
					target, i, w.from, keys, resp.Count, resp.More, w.keys, w.count)
			}
			oracle := rangeInTxn(t, s, r)
			resp.Header, oracle.Header = nil, nil
			if !proto.Equal(resp, oracle) {
				t.Fatalf("%v page %d from %q:\n got %v\nwant %v", target, i, w.from, resp, oracle)
			}
		}
		// Counts of the ranges after those pages, as a later list would
		// ask for them.
		for _, w := range want[1:] {
			r := &pb.RangeRequest{Key: []byte(w.from), RangeEnd: []byte{0}, Revision: rev, Limit: 1}
			resp, err := s.Range(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Count != w.count {
				t.Fatalf("after %v pages: range from %q counts %d, want %d", target, w.from, resp.Count, w.count)
			}
		}
	}

	// Pages in key order, with the order given or not, are still counted
	// from the previous page and read ahead.
	for _, order := range []pb.RangeRequest_SortOrder{pb.RangeRequest_NONE, pb.RangeRequest_ASCEND} {
		before := mvcc.ReadAheadHits(s)
		key := []byte("a")
		pages := 0
		for {
			r := &pb.RangeRequest{Key: key, RangeEnd: []byte{0}, Revision: rev, Limit: 2, SortOrder: order}
			resp, err := s.Range(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			pages++
			oracle := rangeInTxn(t, s, r)
			resp.Header, oracle.Header = nil, nil
			if !proto.Equal(resp, oracle) {
				t.Fatalf("key order %v, page %d from %q:\n got %v\nwant %v", order, pages, key, resp, oracle)
			}
			if !resp.More {
				break
			}
			key = append(append([]byte{}, resp.Kvs[len(resp.Kvs)-1].Key...), 0)
		}
		if hits := mvcc.ReadAheadHits(s) - before; hits != int64(pages-2) {
			t.Fatalf("key order %v: %d of %d pages were read ahead, want %d", order, hits, pages, pages-2)
		}
	}
}
