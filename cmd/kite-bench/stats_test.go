package main

import (
	"context"
	"testing"
	"time"
)

func Test_HistogramPercentilesWithinBucketPrecision(t *testing.T) {
	var h histogram
	// 1..100000 microseconds: the q-th percentile is q*100000 µs.
	for i := 1; i <= 100000; i++ {
		h.record(time.Duration(i) * time.Microsecond)
	}
	for _, q := range []float64{0.5, 0.9, 0.99} {
		want := time.Duration(q*100000) * time.Microsecond
		got := h.percentile(q)
		if diff := float64(got-want) / float64(want); diff < -1.0/64 || diff > 1.0/64 {
			t.Errorf("p%v = %v, want %v within 1/64", q*100, got, want)
		}
	}
	if got, want := h.maximum(), 100*time.Millisecond; got != want {
		t.Errorf("max = %v, want %v", got, want)
	}
}

func Test_HistogramIndexIsMonotonicAndBoundsMatch(t *testing.T) {
	prev := -1
	for v := int64(0); v < 1<<20; v += 7 {
		i := histIndex(v)
		if i < prev {
			t.Fatalf("index(%d) = %d < index of a smaller value %d", v, i, prev)
		}
		if lo, hi := histBounds(i); v < lo || v > hi {
			t.Fatalf("value %d in bucket %d with bounds [%d, %d]", v, i, lo, hi)
		}
		prev = i
	}
	if i := histIndex(1<<63 - 1); i >= histBuckets {
		t.Fatalf("largest value maps to %d, beyond %d buckets", i, histBuckets)
	}
}

func Test_MergeAddsCounts(t *testing.T) {
	var a, b histogram
	a.record(time.Millisecond)
	b.record(3 * time.Millisecond)
	a.merge(&b)
	if a.count() != 2 || a.maximum() != 3*time.Millisecond || a.mean() != 2*time.Millisecond {
		t.Errorf("merged: count %d, max %v, mean %v", a.count(), a.maximum(), a.mean())
	}
}

func Test_CheckLoopback(t *testing.T) {
	for ep, ok := range map[string]bool{
		"http://127.0.0.1:2379": true,
		"http://localhost:2379": true,
		"http://[::1]:2379":     true,
		"127.0.0.2:2379":        true,
		"http://10.0.0.1:2379":  false,
		"https://example.com":   false,
	} {
		if err := checkLoopback(ep); (err == nil) != ok {
			t.Errorf("checkLoopback(%q) = %v, want ok=%v", ep, err, ok)
		}
	}
}

// deadlinePassed is a context whose deadline has passed while its Err is
// still nil, the moment between a context's deadline and its timer firing.
type deadlinePassed struct{ context.Context }

func (deadlinePassed) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }
func (deadlinePassed) Err() error                  { return nil }

func TestRunEnded(t *testing.T) {
	if runEnded(context.Background()) {
		t.Fatal("a context without deadline counts as ended")
	}
	if !runEnded(deadlinePassed{context.Background()}) {
		t.Fatal("a context past its deadline does not count as ended before its timer fires")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if !runEnded(ctx) {
		t.Fatal("a cancelled context does not count as ended")
	}
}
