package server

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kite-db/kite/pkg/mvcc"
)

// fakeCompactions records the revisions a compactor compacts to.
type fakeCompactions struct {
	mu   sync.Mutex
	rev  int64
	revs []int64
	err  error
}

func (f *fakeCompactions) compact(ctx context.Context, rev int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.revs = append(f.revs, rev)
	return f.err
}

func (f *fakeCompactions) current() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rev += 10 // ten writes between two looks
	return f.rev
}

func (f *fakeCompactions) compacted() []int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int64(nil), f.revs...)
}

func newFakeCompactor(f *fakeCompactions, mode string, retention time.Duration) *compactor {
	return &compactor{log: testLogger(nil), compact: f.compact, current: f.current,
		mode: mode, retention: retention, revInterval: 10 * time.Millisecond}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestCompactorRevision(t *testing.T) {
	f := &fakeCompactions{}
	c := newFakeCompactor(f, CompactionModeRevision, 25)
	c.start()
	waitFor(t, "two compactions", func() bool { return len(f.compacted()) >= 2 })
	c.stop()
	revs := f.compacted()
	for i, rev := range revs {
		// Each look adds 10 revisions; compaction keeps the last 25.
		if rev <= 0 || rev%10 != 5 || (i > 0 && rev <= revs[i-1]) {
			t.Fatalf("compacted to %v", revs)
		}
	}
}

// TestCompactorStopWaits: stop cancels a compaction in flight and returns
// only after it returned, so the server closes the store under no
// compaction (closeResources stops the compactor first).
func TestCompactorStopWaits(t *testing.T) {
	entered := make(chan struct{}, 1)
	var returned atomic.Bool
	c := &compactor{log: testLogger(t), current: (&fakeCompactions{}).current,
		mode: CompactionModeRevision, retention: 5, revInterval: time.Millisecond,
		compact: func(ctx context.Context, rev int64) error {
			select {
			case entered <- struct{}{}:
			default:
			}
			<-ctx.Done()
			// Long enough that a stop which did not wait returns first.
			time.Sleep(50 * time.Millisecond)
			returned.Store(true)
			return ctx.Err()
		}}
	c.start()
	select {
	case <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("no compaction started")
	}
	stopped := make(chan struct{})
	go func() { c.stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("stop did not cancel the compaction in flight")
	}
	if !returned.Load() {
		t.Fatal("stop returned while a compaction was still running")
	}
}

func TestCompactorPeriodic(t *testing.T) {
	f := &fakeCompactions{err: mvcc.ErrCompacted} // already compacted counts as done
	c := newFakeCompactor(f, CompactionModePeriodic, 100*time.Millisecond)
	start := time.Now()
	c.start()
	waitFor(t, "a compaction", func() bool { return len(f.compacted()) >= 2 })
	c.stop()
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Fatalf("first compaction after %v, before one period", d)
	}
	revs := f.compacted()
	for i := 1; i < len(revs); i++ {
		if revs[i] <= revs[i-1] {
			t.Fatalf("compaction went backwards: %v", revs)
		}
	}
}

func TestCompactorOff(t *testing.T) {
	if c := newCompactor(testLogger(nil), nil, "", time.Hour); c != nil {
		t.Fatal("compactor without mode")
	}
	if c := newCompactor(testLogger(nil), nil, CompactionModePeriodic, 0); c != nil {
		t.Fatal("compactor with zero retention")
	}
	var c *compactor
	c.start()
	c.stop()
}
