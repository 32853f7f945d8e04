package mvcc_test

import (
	"context"
	"fmt"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/kite-db/kite/pkg/mvcc"
)

// TestStore_PaginatedCountsAtAFixedRevision pages through a range at a fixed
// revision while the range keeps changing, as kube-apiserver's lists do, and
// checks every page's count against a count-only read of the same remaining
// range at that revision: the counts served from pageCounts must be the
// ones a fresh count gives.
func TestStore_PaginatedCountsAtAFixedRevision(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir(), mvcc.Config{})
	for i := range 60 {
		put(t, s, fmt.Sprintf("/p/%03d", i), "v", 0)
	}
	put(t, s, "/q/outside", "v", 0)
	atRev, _ := s.Revisions()
	// After atRev: deletes, new keys inside the range and overwrites.
	for i := 0; i < 60; i += 3 {
		if _, err := s.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte(fmt.Sprintf("/p/%03d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 20 {
		put(t, s, fmt.Sprintf("/p/%03d-new", i), "v", 0)
		put(t, s, fmt.Sprintf("/p/%03d", 1+i), "v2", 0)
	}

	now, _ := s.Revisions()
	for _, tc := range []struct {
		name  string
		rev   int64
		limit int64
		want  int64 // keys in the range at rev
	}{
		{"before the changes", atRev, 7, 60},
		{"after the changes", now, 9, 66}, // 20 deleted, 20 new, 6 deleted ones put again
		{"twice the same pages", atRev, 7, 60},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key, end := []byte("/p/"), []byte("/p0")
			var seen int64
			for page := 0; ; page++ {
				r := &pb.RangeRequest{Key: key, RangeEnd: end, Revision: tc.rev, Limit: tc.limit}
				resp, err := s.Range(ctx, r)
				if err != nil {
					t.Fatalf("page %d: %v", page, err)
				}
				fresh, err := s.Range(ctx, &pb.RangeRequest{Key: key, RangeEnd: end, Revision: tc.rev, CountOnly: true})
				if err != nil {
					t.Fatal(err)
				}
				if resp.Count != fresh.Count {
					t.Fatalf("page %d from %q: count %d, a count-only read says %d", page, key, resp.Count, fresh.Count)
				}
				if page == 0 && resp.Count != tc.want {
					t.Fatalf("first page count %d, want %d", resp.Count, tc.want)
				}
				seen += int64(len(resp.Kvs))
				if !resp.More {
					break
				}
				key = append(append([]byte{}, resp.Kvs[len(resp.Kvs)-1].Key...), 0)
			}
			if seen != tc.want {
				t.Fatalf("pages held %d keys, want %d", seen, tc.want)
			}
		})
	}

	// A page that is not the continuation of a counted one (a filter cut
	// it) must not leave a count behind for the key after it.
	r := &pb.RangeRequest{Key: []byte("/p/"), RangeEnd: []byte("/p0"), Revision: atRev, Limit: 5,
		MinModRevision: 30}
	resp, err := s.Range(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) > 0 {
		next := append(append([]byte{}, resp.Kvs[len(resp.Kvs)-1].Key...), 0)
		got, err := s.Range(ctx, &pb.RangeRequest{Key: next, RangeEnd: []byte("/p0"), Revision: atRev, Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		fresh, err := s.Range(ctx, &pb.RangeRequest{Key: next, RangeEnd: []byte("/p0"), Revision: atRev, CountOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		if got.Count != fresh.Count {
			t.Fatalf("after a filtered page: count %d, want %d", got.Count, fresh.Count)
		}
	}
}
