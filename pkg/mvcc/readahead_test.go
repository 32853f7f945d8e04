package mvcc_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"

	"github.com/kite-db/kite/pkg/mvcc"
)

// rangeInTxn reads r through a read-only Txn, a path that neither reads
// ahead nor remembers counts: the oracle for the paginated reads below.
func rangeInTxn(t *testing.T, s *mvcc.Store, r *pb.RangeRequest) *pb.RangeResponse {
	t.Helper()
	resp, err := s.Txn(context.Background(), &pb.TxnRequest{Success: []*pb.RequestOp{
		{Request: &pb.RequestOp_RequestRange{RequestRange: r}}}})
	if err != nil {
		t.Fatalf("txn range: %v", err)
	}
	return resp.Responses[0].GetResponseRange()
}

// startChain reads the first two pages of r's range, which starts a read-ahead
// chain, and returns the request for the third page.
func startChain(t *testing.T, s *mvcc.Store, r *pb.RangeRequest) *pb.RangeRequest {
	t.Helper()
	for range 2 {
		resp, err := s.Range(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		next := append(append([]byte{}, resp.Kvs[len(resp.Kvs)-1].Key...), 0)
		r = &pb.RangeRequest{Key: next, RangeEnd: r.RangeEnd, Revision: r.Revision, Limit: r.Limit}
	}
	return r
}

// TestStore_ReadAheadPagesMatchFreshReads pages through a range at a fixed
// revision while it changes, and checks every page, most of them read
// ahead, against a fresh read of the same request.
func TestStore_ReadAheadPagesMatchFreshReads(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir(), mvcc.Config{})
	for i := range 100 {
		put(t, s, fmt.Sprintf("/r/%03d", i), fmt.Sprintf("v%d", i), 0)
	}
	atRev, _ := s.Revisions()

	pages := 0
	before := mvcc.ReadAheadHits(s)
	key := []byte("/r/")
	for {
		r := &pb.RangeRequest{Key: key, RangeEnd: []byte("/r0"), Revision: atRev, Limit: 7}
		resp, err := s.Range(ctx, r)
		if err != nil {
			t.Fatalf("page %d: %v", pages, err)
		}
		pages++
		// Changes after atRev, between pages: none may show.
		put(t, s, fmt.Sprintf("/r/%03d", 99-pages), "changed", 0)
		put(t, s, fmt.Sprintf("/r/%03d-new", pages), "new", 0)
		want := rangeInTxn(t, s, &pb.RangeRequest{Key: key, RangeEnd: []byte("/r0"), Revision: atRev, Limit: 7})
		if resp.Header.Revision < atRev {
			t.Fatalf("page %d: header revision %d below the read revision %d", pages, resp.Header.Revision, atRev)
		}
		resp.Header, want.Header = nil, nil
		if !proto.Equal(resp, want) {
			t.Fatalf("page %d from %q:\n got %v\nwant %v", pages, key, resp, want)
		}
		if !resp.More {
			break
		}
		key = append(append([]byte{}, resp.Kvs[len(resp.Kvs)-1].Key...), 0)
	}
	// The first two pages start the chain; every later one was read ahead.
	if hits := mvcc.ReadAheadHits(s) - before; hits != int64(pages-2) {
		t.Fatalf("%d of %d pages were read ahead, want %d", hits, pages, pages-2)
	}

	// A request that differs from the page read ahead (here its limit) is
	// read afresh.
	r := startChain(t, s, &pb.RangeRequest{Key: []byte("/r/"), RangeEnd: []byte("/r0"), Revision: atRev, Limit: 10})
	hits := mvcc.ReadAheadHits(s)
	r.Limit = 11
	resp, err := s.Range(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if mvcc.ReadAheadHits(s) != hits || len(resp.Kvs) != 11 {
		t.Fatalf("a page with another limit was answered from read-ahead (%d keys)", len(resp.Kvs))
	}

	// A compaction past the revision turns a page read ahead into
	// ErrCompacted, as a fresh read would answer.
	r = startChain(t, s, &pb.RangeRequest{Key: []byte("/r/"), RangeEnd: []byte("/r0"), Revision: atRev, Limit: 10})
	now, _ := s.Revisions()
	if _, err := s.Compact(ctx, &pb.CompactionRequest{Revision: now}); err != nil {
		t.Fatal(err)
	}
	hits = mvcc.ReadAheadHits(s)
	if _, err := s.Range(ctx, r); !errors.Is(err, mvcc.ErrCompacted) {
		t.Fatalf("page at a compacted revision: err %v, want ErrCompacted", err)
	}
	if mvcc.ReadAheadHits(s) != hits+1 {
		t.Fatalf("the page after the compaction was not read ahead; the check above proved nothing")
	}
}

// TestStore_ReadAheadConcurrentChains runs several paginated lists at once,
// at fixed revisions, while writers change the range and compactions move
// past some of those revisions, then closes the store with chains still
// reading. Every page that succeeds must equal a fresh read of the same
// request, a page at a compacted revision must fail with ErrCompacted, and
// (under -race) nothing may race.
func TestStore_ReadAheadConcurrentChains(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openStore(t, dir, mvcc.Config{})
	for i := range 300 {
		put(t, s, fmt.Sprintf("/c/%04d", i), "v", 0)
	}
	stop := make(chan struct{})
	var writers sync.WaitGroup
	writers.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := s.Put(ctx, &pb.PutRequest{Key: []byte(fmt.Sprintf("/c/%04d", i%400)), Value: []byte("w")}); err != nil {
				t.Error(err)
				return
			}
			if i%150 == 149 {
				now, _ := s.Revisions()
				if _, err := s.Compact(ctx, &pb.CompactionRequest{Revision: now - 50}); err != nil &&
					!errors.Is(err, mvcc.ErrCompacted) {
					t.Error(err)
					return
				}
			}
		}
	})

	var readers sync.WaitGroup
	for c := range 4 {
		readers.Go(func() {
			for range 5 {
				rev, _ := s.Revisions()
				r := &pb.RangeRequest{Key: []byte("/c/"), RangeEnd: []byte("/c0"), Revision: rev, Limit: int64(7 + c)}
				for {
					resp, err := s.Range(ctx, r)
					if errors.Is(err, mvcc.ErrCompacted) {
						break // the list would start over, as kube-apiserver's does
					}
					if err != nil {
						t.Error(err)
						return
					}
					want, werr := s.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{
						{Request: &pb.RequestOp_RequestRange{RequestRange: r}}}})
					if werr == nil {
						w := want.Responses[0].GetResponseRange()
						resp.Header, w.Header = nil, nil
						if !proto.Equal(resp, w) {
							t.Errorf("page from %q at %d differs from a fresh read", r.Key, r.Revision)
							return
						}
					}
					if !resp.More {
						break
					}
					r = &pb.RangeRequest{Key: append(append([]byte{}, resp.Kvs[len(resp.Kvs)-1].Key...), 0),
						RangeEnd: r.RangeEnd, Revision: r.Revision, Limit: r.Limit}
				}
			}
		})
	}
	readers.Wait()
	if mvcc.ReadAheadHits(s) == 0 {
		t.Error("no page was read ahead: the test exercised nothing")
	}
	// Start chains and close the store under them.
	rev, _ := s.Revisions()
	startChain(t, s, &pb.RangeRequest{Key: []byte("/c/"), RangeEnd: []byte("/c0"), Revision: rev, Limit: 5})
	close(stop)
	writers.Wait()
	closeStore(t, s)
}
