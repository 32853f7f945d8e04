package mvcc_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/kite-db/kite/pkg/drivers/sqlite"
	"github.com/kite-db/kite/pkg/mvcc"
)

// faultyBackend is the real SQLite backend with faults injected into its
// write transactions: a gate that holds BeginWrite (so requests queue up
// into one batch), a key whose Put fails, and commits that fail.
type faultyBackend struct {
	mvcc.Backend
	gate   atomic.Pointer[chan struct{}] // when set, BeginWrite waits for it to close
	poison []byte
	// commits counts commits; the one numbered failCommit fails.
	commits, failCommit atomic.Int32
	// beforeCommit, when set, runs at the start of every commit, while
	// the batch is applied and not yet durable.
	beforeCommit atomic.Pointer[func()]
}

var errInjected = errors.New("injected storage failure")

func (f *faultyBackend) BeginWrite(ctx context.Context) (mvcc.WriteTx, error) {
	if g := f.gate.Load(); g != nil {
		<-*g
	}
	tx, err := f.Backend.BeginWrite(ctx)
	if err != nil {
		return nil, err
	}
	return &faultyTx{WriteTx: tx, f: f}, nil
}

type faultyTx struct {
	mvcc.WriteTx
	f *faultyBackend
}

func (t *faultyTx) Put(ctx context.Context, kv *mvccpb.KeyValue, sub int64) error {
	if t.f.poison != nil && bytes.Equal(kv.Key, t.f.poison) {
		return errInjected
	}
	return t.WriteTx.Put(ctx, kv, sub)
}

func (t *faultyTx) Commit() error {
	if f := t.f.beforeCommit.Load(); f != nil {
		(*f)()
	}
	if n := t.f.commits.Add(1); n == t.f.failCommit.Load() {
		t.WriteTx.Rollback()
		return errInjected
	}
	return t.WriteTx.Commit()
}

func openFaulty(t *testing.T) (*mvcc.Store, *faultyBackend) {
	t.Helper()
	ctx := context.Background()
	b, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "kite.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := &faultyBackend{Backend: b}
	s, err := mvcc.Open(ctx, f, mvcc.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(); b.Close() })
	return s, f
}

// putAll holds the writer with one blocker put, queues n puts behind it,
// then lets the writer go: the n puts share the batch after the blocker's.
// It returns each put's revision or error.
func putAll(t *testing.T, s *mvcc.Store, f *faultyBackend, n int) ([]int64, []error) {
	t.Helper()
	gate := make(chan struct{})
	f.gate.Store(&gate)
	revs, errs := make([]int64, n), make([]error, n)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if _, err := s.Put(context.Background(), &pb.PutRequest{Key: []byte("blocker"), Value: []byte("v")}); err != nil {
			t.Errorf("blocker put: %v", err)
		}
	}()
	waitQueued(1)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := s.Put(context.Background(), &pb.PutRequest{Key: fmt.Appendf(nil, "k%02d", i), Value: []byte("v")})
			errs[i] = err
			if err == nil {
				revs[i] = resp.Header.Revision
			}
		}()
	}
	waitQueued(n)
	close(gate)
	wg.Wait()
	f.gate.Store(nil)
	return revs, errs
}

// waitQueued gives the n client goroutines time to queue behind the held
// writer. It cannot observe the queue, so a slow machine may split the batch;
// the tests' assertions hold for any split, and a split only makes the
// one-bad-request case less demanding, never wrong.
func waitQueued(n int) {
	time.Sleep(time.Duration(20*n) * time.Millisecond)
}

func TestWriter_FailedCommitFailsWholeBatchAndLeavesNoTrace(t *testing.T) {
	s, f := openFaulty(t)
	// The next commit is the blocker's batch, the one after it the batch of
	// the eight puts queued behind it.
	f.failCommit.Store(f.commits.Load() + 2)
	_, errs := putAll(t, s, f, 8)
	for i, err := range errs {
		if !errors.Is(err, errInjected) {
			t.Errorf("put %d in the batch whose commit failed: err %v, want the injected failure", i, err)
		}
	}
	cur, _ := s.Revisions()
	if cur != 2 {
		t.Fatalf("revision %d after the failed batch, want 2 (the blocker's)", cur)
	}
	r, err := s.Range(context.Background(), &pb.RangeRequest{Key: []byte("k"), RangeEnd: []byte("l")})
	if err != nil || len(r.Kvs) != 0 || r.Header.Revision != 2 {
		t.Fatalf("after a failed commit: %v %v, want no keys at revision 2", r, err)
	}
	// The next write takes the very next revision: no gap was left.
	if got := put(t, s, "next", "v", 0); got != 3 {
		t.Fatalf("next put got revision %d, want 3", got)
	}
}

func TestWriter_OneUnstorableRequestFailsAlone(t *testing.T) {
	s, f := openFaulty(t)
	f.poison = []byte("k03")
	revs, errs := putAll(t, s, f, 12)
	var ok []int64
	for i, err := range errs {
		switch {
		case i == 3 && !errors.Is(err, errInjected):
			t.Errorf("poisoned put: err %v, want the injected failure", err)
		case i != 3 && err != nil:
			t.Errorf("put %d failed with its batch: %v", i, err)
		case err == nil:
			ok = append(ok, revs[i])
		}
	}
	sort.Slice(ok, func(i, j int) bool { return ok[i] < ok[j] })
	for i, rev := range ok {
		if rev != int64(i+3) { // 2 is the blocker's
			t.Fatalf("revisions %v are not dense from 2", ok)
		}
	}
	r, err := s.Range(context.Background(), &pb.RangeRequest{Key: []byte("k03")})
	if err != nil || len(r.Kvs) != 0 {
		t.Fatalf("poisoned key: %v %v, want absent", r, err)
	}
}
