package mvcc_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/kite-db/kite/pkg/drivers/sqlite"
	"github.com/kite-db/kite/pkg/mvcc"
)

// revRecorder is a real SQLite backend whose read transactions note the
// revision of every Range they serve.
type revRecorder struct {
	*sqlite.Backend
	mu   sync.Mutex
	revs []int64
}

func (r *revRecorder) BeginRead(ctx context.Context) (mvcc.ReadTx, error) {
	tx, err := r.Backend.BeginRead(ctx)
	if err != nil {
		return nil, err
	}
	return &recordingTx{ReadTx: tx, r: r}, nil
}

func (r *revRecorder) last() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.revs[len(r.revs)-1]
}

type recordingTx struct {
	mvcc.ReadTx
	r *revRecorder
}

func (t *recordingTx) Range(ctx context.Context, key, end []byte, rev, limit int64, keysOnly bool) ([]*mvccpb.KeyValue, error) {
	t.r.mu.Lock()
	t.r.revs = append(t.r.revs, rev)
	t.r.mu.Unlock()
	return t.ReadTx.Range(ctx, key, end, rev, limit, keysOnly)
}

// A read at an older revision is served from the latest state when nothing
// in its range changed since, and from history otherwise; both give etcd's
// answer at that revision.
func TestOldRevisionReadOfUnchangedRangeServedLive(t *testing.T) {
	ctx := context.Background()
	b, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "kite.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rec := &revRecorder{Backend: b}
	s, err := mvcc.Open(ctx, rec, mvcc.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(); b.Close() })

	for i := range 5 {
		put(t, s, fmt.Sprintf("/a/%d", i), "v1", 0)
	}
	listRev := put(t, s, "/b/0", "v1", 0)
	for range 3 {
		put(t, s, "/b/0", "v2", 0)
	}
	current := put(t, s, "/b/1", "v1", 0)

	page := func(rev int64) *pb.RangeResponse {
		t.Helper()
		resp, err := s.Range(ctx, &pb.RangeRequest{Key: []byte("/a/"), RangeEnd: []byte("/a0"), Limit: 2, Revision: rev})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := page(listRev)
	if got := rec.last(); got != current {
		t.Fatalf("a page of an unchanged range at revision %d was read at %d, want the current %d", listRev, got, current)
	}
	if len(resp.Kvs) != 2 || resp.Count != 5 || !resp.More || string(resp.Kvs[1].Value) != "v1" {
		t.Fatalf("page at %d: %v", listRev, resp)
	}

	// Once a key of the range changes, the old revision is read from
	// history and still answers with the old value.
	put(t, s, "/a/1", "v2", 0)
	resp = page(listRev)
	if got := rec.last(); got != listRev {
		t.Fatalf("a page of a changed range was read at %d, want history at %d", got, listRev)
	}
	if string(resp.Kvs[1].Value) != "v1" || resp.Kvs[1].ModRevision > listRev || resp.Count != 5 {
		t.Fatalf("page at %d after /a/1 changed: %v", listRev, resp)
	}
	// A key created inside the range after the revision must not appear.
	put(t, s, "/a/00", "new", 0)
	resp, err = s.Range(ctx, &pb.RangeRequest{Key: []byte("/a/"), RangeEnd: []byte("/a0"), Revision: listRev - 1})
	if err != nil || resp.Count != 5 || string(resp.Kvs[0].Key) != "/a/0" {
		t.Fatalf("range at %d after a create in it: %v, %v", listRev-1, resp, err)
	}
}

// countRecorder counts the Count calls that reach the database.
type countRecorder struct {
	*sqlite.Backend
	counts atomic.Int64
}

func (r *countRecorder) BeginRead(ctx context.Context) (mvcc.ReadTx, error) {
	tx, err := r.Backend.BeginRead(ctx)
	if err != nil {
		return nil, err
	}
	return &countingReadTx{ReadTx: tx, r: r}, nil
}

type countingReadTx struct {
	mvcc.ReadTx
	r *countRecorder
}

func (t *countingReadTx) Count(ctx context.Context, key, end []byte, rev int64) (int64, error) {
	t.r.counts.Add(1)
	return t.ReadTx.Count(ctx, key, end, rev)
}

// A count is carried forward through the log (creates add, deletes take
// away, updates change nothing) instead of walking the range again, and
// always equals the number of keys a full read of the range returns.
func TestCountCarriedForwardThroughTheLog(t *testing.T) {
	ctx := context.Background()
	b, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "kite.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rec := &countRecorder{Backend: b}
	s, err := mvcc.Open(ctx, rec, mvcc.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(); b.Close() })
	count := func(rev int64) (int64, int64) {
		t.Helper()
		c, err := s.Range(ctx, &pb.RangeRequest{Key: []byte("/c/"), RangeEnd: []byte("/c0"), CountOnly: true, Revision: rev})
		if err != nil {
			t.Fatal(err)
		}
		all, err := s.Range(ctx, &pb.RangeRequest{Key: []byte("/c/"), RangeEnd: []byte("/c0"), Revision: rev})
		if err != nil {
			t.Fatal(err)
		}
		return c.Count, int64(len(all.Kvs))
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := range 300 {
		k := fmt.Sprintf("/c/%02d", rnd.IntN(40))
		switch op := rnd.IntN(10); {
		case op < 5:
			put(t, s, k, fmt.Sprint(i), 0)
		case op < 8:
			if _, err := s.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte(k)}); err != nil {
				t.Fatal(err)
			}
		case op < 9:
			put(t, s, fmt.Sprintf("/d/%d", i), "x", 0) // outside the range
		default:
			// A range delete inside the range, several tombstones at once.
			if _, err := s.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte("/c/1"), RangeEnd: []byte("/c/2")}); err != nil {
				t.Fatal(err)
			}
		}
		if got, want := count(0); got != want {
			t.Fatalf("after op %d: count %d, a read of the range has %d keys", i, got, want)
		}
	}
	before := rec.counts.Load()
	for range 10 {
		put(t, s, "/c/05", "again", 0)
		put(t, s, "/d/x", "again", 0)
		if got, want := count(0); got != want {
			t.Fatalf("count %d, a read of the range has %d keys", got, want)
		}
	}
	if n := rec.counts.Load() - before; n != 0 {
		t.Fatalf("%d counts walked the range; the remembered count should have carried forward", n)
	}
	// An older revision than the one remembered is counted again, right.
	if got, want := count(5); got != want {
		t.Fatalf("count at revision 5: %d, want %d", got, want)
	}
}

// Counts, the pages of a paginated list and full reads agree at every
// revision while writers create, update and delete keys of the range (alone,
// in ranges, in transactions and by lease expiry), write outside it, and
// compact: the carried-forward counts and the live reads of unchanged ranges
// must never give another answer than a read of history would.
func TestCountsAndPagesUnderConcurrentWrites(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir(), mvcc.Config{})
	t.Cleanup(func() { closeStore(t, s) })
	duration := 8 * time.Second
	if testing.Short() {
		duration = 2 * time.Second
	}
	var (
		wg      sync.WaitGroup
		stop    = make(chan struct{})
		errMu   sync.Mutex
		reports int
	)
	report := func(format string, args ...any) {
		errMu.Lock()
		defer errMu.Unlock()
		if reports++; reports <= 10 {
			t.Errorf(format, args...)
		}
	}
	key := func(rnd *rand.Rand) []byte { return []byte(fmt.Sprintf("/s/%03d", rnd.IntN(300))) }
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(w), 1))
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := key(rnd)
				var err error
				switch op := rnd.IntN(12); {
				case op < 4:
					_, err = s.Put(ctx, &pb.PutRequest{Key: k, Value: []byte(fmt.Sprint(i))})
				case op < 6:
					_, err = s.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: k})
				case op < 7:
					_, err = s.Put(ctx, &pb.PutRequest{Key: []byte(fmt.Sprintf("/t/%d", rnd.IntN(1000))), Value: []byte("x")})
				case op < 9:
					k2 := key(rnd)
					if string(k2) == string(k) {
						continue
					}
					// Create k and delete k2 in one revision, or delete k.
					_, err = s.Txn(ctx, &pb.TxnRequest{
						Compare: []*pb.Compare{{Key: k, Target: pb.Compare_MOD, Result: pb.Compare_EQUAL,
							TargetUnion: &pb.Compare_ModRevision{ModRevision: 0}}},
						Success: []*pb.RequestOp{
							{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: k, Value: []byte("c")}}},
							{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: k2}}},
						},
						Failure: []*pb.RequestOp{
							{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: k}}},
						},
					})
				case op < 10:
					var l *pb.LeaseGrantResponse
					if l, err = s.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: 1}); err == nil {
						_, err = s.Put(ctx, &pb.PutRequest{Key: k, Value: []byte("l"), Lease: l.ID})
					}
				case op < 11:
					a := rnd.IntN(290)
					_, err = s.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte(fmt.Sprintf("/s/%03d", a)),
						RangeEnd: []byte(fmt.Sprintf("/s/%03d", a+5))})
				default:
					if current, _ := s.Revisions(); current > 500 && rnd.IntN(50) == 0 {
						// Another writer may have compacted past it
						// meanwhile: the Store's own error says so.
						_, err = s.Compact(ctx, &pb.CompactionRequest{Revision: current - 400})
						if errors.Is(err, mvcc.ErrCompacted) {
							err = nil
						}
					}
				}
				if err != nil {
					report("write: %v", err)
				}
			}
		}()
	}
	for r := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(r), 2))
			for {
				select {
				case <-stop:
					return
				default:
				}
				current, compacted := s.Revisions()
				rev := current - int64(rnd.IntN(5))
				if rnd.IntN(2) == 0 && current-compacted > 2 {
					rev = compacted + 1 + rnd.Int64N(current-compacted-1)
				}
				if rev < 1 {
					continue // 0 and below mean the current revision, which moves between reads
				}
				start := []byte("/s/")
				if rnd.IntN(2) == 0 {
					start = key(rnd)
				}
				verifyAt(ctx, s, start, []byte("/s0"), rev, report)
			}
		}()
	}
	time.Sleep(duration)
	close(stop)
	wg.Wait()
}

// verifyAt compares, at rev, a count-only read and the pages of a paginated
// list (their counts and keys) with a full read of [start, end). A
// compaction past rev midway ends the comparison: etcd fails those reads too.
func verifyAt(ctx context.Context, s *mvcc.Store, start, end []byte, rev int64, report func(string, ...any)) {
	all, err := s.Range(ctx, &pb.RangeRequest{Key: start, RangeEnd: end, Revision: rev, KeysOnly: true})
	if err != nil {
		return
	}
	count, err := s.Range(ctx, &pb.RangeRequest{Key: start, RangeEnd: end, Revision: rev, CountOnly: true})
	if err != nil {
		return
	}
	if count.Count != int64(len(all.Kvs)) {
		report("count of [%s, %s) at %d: %d, a read has %d keys", start, end, rev, count.Count, len(all.Kvs))
	}
	key, seen := start, 0
	for {
		page, err := s.Range(ctx, &pb.RangeRequest{Key: key, RangeEnd: end, Revision: rev, Limit: 7})
		if err != nil {
			return
		}
		if want := int64(len(all.Kvs) - seen); page.Count != want {
			report("page from %q at %d: count %d, want %d", key, rev, page.Count, want)
			return
		}
		for _, kv := range page.Kvs {
			if seen >= len(all.Kvs) || string(kv.Key) != string(all.Kvs[seen].Key) {
				report("page from %q at %d: key %q is not the read's key %d", key, rev, kv.Key, seen)
				return
			}
			seen++
		}
		if !page.More {
			break
		}
		key = append(append([]byte{}, page.Kvs[len(page.Kvs)-1].Key...), 0)
	}
	if seen != len(all.Kvs) {
		report("pages at %d listed %d keys, a read has %d", rev, seen, len(all.Kvs))
	}
}
