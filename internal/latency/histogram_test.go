package latency

import (
	"testing"
	"time"
)

func Test_HistogramPercentilesWithinBucketPrecision(t *testing.T) {
	var h Histogram
	// 1..100000 microseconds: the q-th percentile is q*100000 µs.
	for i := 1; i <= 100000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	for _, q := range []float64{0.5, 0.9, 0.99} {
		want := time.Duration(q*100000) * time.Microsecond
		got := h.Percentile(q)
		if diff := float64(got-want) / float64(want); diff < -1.0/64 || diff > 1.0/64 {
			t.Errorf("p%v = %v, want %v within 1/64", q*100, got, want)
		}
	}
	if got, want := h.Max(), 100*time.Millisecond; got != want {
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
	var a, b Histogram
	a.Record(time.Millisecond)
	b.Record(3 * time.Millisecond)
	a.Merge(&b)
	if a.Count() != 2 || a.Max() != 3*time.Millisecond || a.Mean() != 2*time.Millisecond {
		t.Errorf("merged: count %d, max %v, mean %v", a.Count(), a.Max(), a.Mean())
	}
}
