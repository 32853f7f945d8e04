package mvcc_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/kite-db/kite/pkg/drivers/sqlite"
	"github.com/kite-db/kite/pkg/mvcc"
)

// openStore opens a Store on a real SQLite file in dir.
func openStore(t *testing.T, dir string, cfg mvcc.Config) *mvcc.Store {
	t.Helper()
	ctx := context.Background()
	b, err := sqlite.Open(ctx, filepath.Join(dir, "kite.db"), sqlite.Options{})
	if err != nil {
		t.Fatalf("open sqlite: %v", err)
	}
	s, err := mvcc.Open(ctx, b, cfg)
	if err != nil {
		b.Close()
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() {
		s.Close()
		b.Close()
	})
	return s
}

func closeStore(t *testing.T, s *mvcc.Store) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("close store: %v", err)
	}
	if err := s.Backend().Close(); err != nil {
		t.Fatalf("close backend: %v", err)
	}
}

func put(t *testing.T, s *mvcc.Store, key, val string, lease int64) int64 {
	t.Helper()
	resp, err := s.Put(context.Background(), &pb.PutRequest{Key: []byte(key), Value: []byte(val), Lease: lease})
	if err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	return resp.Header.Revision
}

func TestStore_ConcurrentWritesGetDenseRevisions(t *testing.T) {
	s := openStore(t, t.TempDir(), mvcc.Config{})
	const writers, each = 16, 40
	var (
		mu   sync.Mutex
		revs []int64
		wg   sync.WaitGroup
	)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				resp, err := s.Put(context.Background(), &pb.PutRequest{Key: fmt.Appendf(nil, "k/%d/%d", w, i), Value: []byte("v")})
				if err != nil {
					t.Errorf("put: %v", err)
					return
				}
				mu.Lock()
				revs = append(revs, resp.Header.Revision)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	sort.Slice(revs, func(i, j int) bool { return revs[i] < revs[j] })
	for i, rev := range revs {
		if want := int64(i + 2); rev != want {
			t.Fatalf("revision #%d = %d, want %d (revisions must be dense and unique)", i, rev, want)
		}
	}
	if cur, _ := s.Revisions(); cur != writers*each+1 {
		t.Fatalf("current revision %d, want %d", cur, writers*each+1)
	}
}

func TestStore_TxnSharesOneRevisionAndChecksBeforeWriting(t *testing.T) {
	s := openStore(t, t.TempDir(), mvcc.Config{})
	ctx := context.Background()
	put(t, s, "a", "1", 0)
	putOp := func(k string, lease int64) *pb.RequestOp {
		return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(k), Value: []byte("x"), Lease: lease}}}
	}
	resp, err := s.Txn(ctx, &pb.TxnRequest{
		Compare: []*pb.Compare{{Key: []byte("a"), Target: pb.Compare_VALUE, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_Value{Value: []byte("1")}}},
		Success: []*pb.RequestOp{putOp("b", 0), putOp("c", 0)},
	})
	if err != nil {
		t.Fatalf("txn: %v", err)
	}
	if !resp.Succeeded || resp.Header.Revision != 3 {
		t.Fatalf("txn succeeded=%v rev=%d, want true 3", resp.Succeeded, resp.Header.Revision)
	}
	// A put on an unknown lease rejects the whole txn: nothing is written.
	_, err = s.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{putOp("d", 0), putOp("e", 12345)}})
	if !errors.Is(err, mvcc.ErrLeaseNotFound) {
		t.Fatalf("txn with unknown lease: err %v, want ErrLeaseNotFound", err)
	}
	got, err := s.Range(ctx, &pb.RangeRequest{Key: []byte("d")})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Kvs) != 0 || got.Header.Revision != 3 {
		t.Fatalf("after rejected txn: %d keys at revision %d, want 0 at 3", len(got.Kvs), got.Header.Revision)
	}
}

func TestStore_LeaseExpiryDeletesKeysInOneRevision(t *testing.T) {
	s := openStore(t, t.TempDir(), mvcc.Config{})
	ctx := context.Background()
	g, err := s.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: 1})
	if err != nil {
		t.Fatal(err)
	}
	if g.TTL != 2 {
		t.Fatalf("granted TTL %d, want the minimum 2", g.TTL)
	}
	for _, k := range []string{"l/b", "l/a", "l/c"} {
		put(t, s, k, "v", g.ID)
	}
	before, _ := s.Revisions()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := s.Range(ctx, &pb.RangeRequest{Key: []byte("l/"), RangeEnd: []byte("l0"), CountOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		if r.Count == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lease keys still present after 10s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	after, _ := s.Revisions()
	if after != before+1 {
		t.Fatalf("expiry moved revision %d -> %d, want exactly one revision", before, after)
	}
	if _, err := s.LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: g.ID}); !errors.Is(err, mvcc.ErrLeaseNotFound) {
		t.Fatalf("expired lease TimeToLive err %v, want ErrLeaseNotFound", err)
	}
}

func TestStore_RestartKeepsRevisionsLeasesAndCompaction(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s := openStore(t, dir, mvcc.Config{})
	g, err := s.LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: 77, TTL: 60})
	if err != nil {
		t.Fatal(err)
	}
	put(t, s, "k", "1", g.ID)
	put(t, s, "k", "2", 0)
	rev := put(t, s, "k", "3", 0)
	if _, err := s.Compact(ctx, &pb.CompactionRequest{Revision: rev - 1, Physical: true}); err != nil {
		t.Fatal(err)
	}
	closeStore(t, s)

	s = openStore(t, dir, mvcc.Config{})
	if cur, comp := s.Revisions(); cur != rev || comp != rev-1 {
		t.Fatalf("after restart revisions %d/%d, want %d/%d", cur, comp, rev, rev-1)
	}
	ttl, err := s.LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: 77})
	if err != nil || ttl.GrantedTTL != 60 {
		t.Fatalf("lease after restart: %v %v", ttl, err)
	}
	if _, err := s.Range(ctx, &pb.RangeRequest{Key: []byte("k"), Revision: rev - 2}); !errors.Is(err, mvcc.ErrCompacted) {
		t.Fatalf("read below compaction: err %v, want ErrCompacted", err)
	}
	r, err := s.Range(ctx, &pb.RangeRequest{Key: []byte("k"), Revision: rev - 1})
	if err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "2" || r.Kvs[0].Version != 2 {
		t.Fatalf("read at compacted revision: %v %v", r, err)
	}
}

func TestStore_PhysicalCompactionRemovesSupersededRows(t *testing.T) {
	s := openStore(t, t.TempDir(), mvcc.Config{CompactBatchRevisions: 7})
	ctx := context.Background()
	for i := range 50 {
		put(t, s, fmt.Sprintf("k%d", i%5), fmt.Sprint(i), 0)
	}
	if _, err := s.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte("k0")}); err != nil {
		t.Fatal(err)
	}
	cur, _ := s.Revisions()
	if _, err := s.Compact(ctx, &pb.CompactionRequest{Revision: cur, Physical: true}); err != nil {
		t.Fatal(err)
	}
	tx, err := s.Backend().BeginRead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	rows, err := tx.Changes(ctx, 1, cur, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	// k1..k4 keep their newest version; k0's versions and tombstone are gone.
	if len(rows) != 4 {
		t.Fatalf("%d rows left after compaction, want 4: %v", len(rows), rows)
	}
	for _, c := range rows {
		if c.Deleted || string(c.KV.Key) == "k0" {
			t.Fatalf("row %v should have been compacted", c.KV)
		}
	}
}

func TestStore_QuotaRaisesNoSpaceAndRefusesPuts(t *testing.T) {
	s := openStore(t, t.TempDir(), mvcc.Config{QuotaBackendBytes: 256 << 10})
	ctx := context.Background()
	big := make([]byte, 16<<10)
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		_, err = s.Put(ctx, &pb.PutRequest{Key: fmt.Appendf(nil, "big%d", i), Value: big})
		// The quota reads the database size at most every 100 ms.
		time.Sleep(20 * time.Millisecond)
	}
	if !errors.Is(err, mvcc.ErrNoSpace) {
		t.Fatalf("puts past the quota: err %v, want ErrNoSpace", err)
	}
	alarms, _ := s.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_GET})
	if len(alarms.Alarms) != 1 || alarms.Alarms[0].Alarm != pb.AlarmType_NOSPACE {
		t.Fatalf("alarms %v, want NOSPACE", alarms.Alarms)
	}
	if _, err := s.Put(ctx, &pb.PutRequest{Key: []byte("small"), Value: []byte("x")}); !errors.Is(err, mvcc.ErrNoSpace) {
		t.Fatalf("put under alarm: %v, want ErrNoSpace", err)
	}
	if _, err := s.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte("big"), RangeEnd: []byte("bih")}); err != nil {
		t.Fatalf("delete under alarm must work: %v", err)
	}
}

// The NOSPACE alarm is stored state: it survives a restart, and writes stay
// refused until it is disarmed, as with etcd.
func TestStore_AlarmSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s := openStore(t, dir, mvcc.Config{MemberID: 42})
	nospace := &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: 42, Alarm: pb.AlarmType_NOSPACE}
	if resp, err := s.Alarm(ctx, nospace); err != nil || len(resp.Alarms) != 1 {
		t.Fatalf("activate: %v %v", resp, err)
	}
	if resp, err := s.Alarm(ctx, nospace); err != nil || len(resp.Alarms) != 0 {
		t.Fatalf("activate again: %v %v, want no change listed", resp, err)
	}
	closeStore(t, s)

	s = openStore(t, dir, mvcc.Config{MemberID: 42})
	got, _ := s.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_GET})
	if len(got.Alarms) != 1 || got.Alarms[0].MemberID != 42 || got.Alarms[0].Alarm != pb.AlarmType_NOSPACE {
		t.Fatalf("alarms after restart: %v, want NOSPACE of member 42", got.Alarms)
	}
	if _, err := s.Put(ctx, &pb.PutRequest{Key: []byte("k"), Value: []byte("v")}); !errors.Is(err, mvcc.ErrNoSpace) {
		t.Fatalf("put after restart under alarm: %v, want ErrNoSpace", err)
	}
	disarm := &pb.AlarmRequest{Action: pb.AlarmRequest_DEACTIVATE, MemberID: 42, Alarm: pb.AlarmType_NOSPACE}
	if resp, err := s.Alarm(ctx, disarm); err != nil || len(resp.Alarms) != 1 {
		t.Fatalf("deactivate: %v %v", resp, err)
	}
	put(t, s, "k", "v", 0)
}

// A txn may delete a key through a from-key range and put it again (etcd's
// duplicate check lets it through); the put creates the key anew, and
// compaction at that revision keeps it readable.
func TestStore_DeleteAndPutInOneTxn(t *testing.T) {
	s := openStore(t, t.TempDir(), mvcc.Config{})
	ctx := context.Background()
	put(t, s, "a", "1", 0)
	put(t, s, "b", "1", 0)
	resp, err := s.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{
		{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte("a"), RangeEnd: []byte{0}}}},
		{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("b"), Value: []byte("2"), PrevKv: true}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	rev := resp.Header.Revision
	if pr := resp.Responses[1].GetResponsePut(); pr.PrevKv != nil {
		t.Fatalf("put after delete has prev_kv %v, want none", pr.PrevKv)
	}
	if _, err := s.Compact(ctx, &pb.CompactionRequest{Revision: rev, Physical: true}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Range(ctx, &pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, Revision: rev})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Kvs) != 1 {
		t.Fatalf("range at compacted revision: %v, want only b", got.Kvs)
	}
	if kv := got.Kvs[0]; string(kv.Key) != "b" || kv.CreateRevision != rev || kv.Version != 1 || string(kv.Value) != "2" {
		t.Fatalf("b = %v, want created anew at %d with version 1", kv, rev)
	}
}

// IsReadOnlyTxn is etcd's rule: a nested txn is a write even when it only
// reads, so etcd proposes it (and checks its size like any proposal).
func TestIsReadOnlyTxn(t *testing.T) {
	get := func(k string) *pb.RequestOp {
		return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte(k)}}}
	}
	nested := func(ops ...*pb.RequestOp) *pb.RequestOp {
		return &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Success: ops}}}
	}
	put := &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("p")}}}
	for _, tt := range []struct {
		name string
		req  *pb.TxnRequest
		want bool
	}{
		{"empty", &pb.TxnRequest{}, true},
		{"gets", &pb.TxnRequest{Success: []*pb.RequestOp{get("a")}, Failure: []*pb.RequestOp{get("b")}}, true},
		{"put", &pb.TxnRequest{Success: []*pb.RequestOp{get("a"), put}}, false},
		{"nested read-only txn", &pb.TxnRequest{Failure: []*pb.RequestOp{nested(get("a"))}}, false},
		{"nested put", &pb.TxnRequest{Success: []*pb.RequestOp{nested(put)}}, false},
	} {
		if got := mvcc.IsReadOnlyTxn(tt.req); got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, got, tt.want)
		}
	}
}

// stallCompactBackend's compaction steps block until the Store's context
// ends, so that Close lands while a step is running on the writer.
type stallCompactBackend struct {
	mvcc.Backend
	stepping chan struct{} // closed when the first step is blocked
	once     sync.Once
}

func (b *stallCompactBackend) BeginWrite(ctx context.Context) (mvcc.WriteTx, error) {
	tx, err := b.Backend.BeginWrite(ctx)
	if err != nil {
		return nil, err
	}
	return &stallCompactTx{WriteTx: tx, b: b}, nil
}

type stallCompactTx struct {
	mvcc.WriteTx
	b *stallCompactBackend
}

func (tx *stallCompactTx) CompactBatch(ctx context.Context, _, _, _ int64) (int64, error) {
	tx.b.once.Do(func() { close(tx.b.stepping) })
	<-ctx.Done()
	return 0, nil
}

// TestStore_CloseDuringCompactionStep: Close ends the compactor's wait for
// a step the writer is still running. Under -race this shows the compactor
// reading nothing the step's transaction writes once it has stopped
// waiting for it.
func TestStore_CloseDuringCompactionStep(t *testing.T) {
	ctx := context.Background()
	sb, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "kite.db"), sqlite.Options{})
	if err != nil {
		t.Fatalf("open sqlite: %v", err)
	}
	defer sb.Close()
	b := &stallCompactBackend{Backend: sb, stepping: make(chan struct{})}
	s, err := mvcc.Open(ctx, b, mvcc.Config{})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	for i := range 10 {
		put(t, s, fmt.Sprintf("k%d", i%3), fmt.Sprint(i), 0)
	}
	cur, _ := s.Revisions()
	if _, err := s.Compact(ctx, &pb.CompactionRequest{Revision: cur}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.stepping:
	case <-time.After(10 * time.Second):
		t.Fatal("no compaction step began")
	}
	if err := s.Close(); err != nil {
		t.Fatalf("close store: %v", err)
	}
}
