// Package latency is the latency histogram of kite's load tools
// (cmd/kite-bench, cmd/kite-soak).
package latency

import (
	"math/bits"
	"time"
)

// Histogram is a log-linear latency histogram in nanoseconds: 64 linear
// sub-buckets per power of two, so any recorded value is reported within
// 1/64 (~1.6%) of itself. A fixed array instead of a slice of samples keeps
// memory bounded however long a duration-bounded run lasts, and lets every
// worker record without locks and merge once at the end.
//
// Index layout: values below 128 ns map to themselves; above, a value with
// shift s = bitlen(v)-7 maps to s*64 + (v >> s), whose top bits lie in
// [64, 128), so consecutive powers of two occupy consecutive 64-wide ranges.
type Histogram struct {
	counts [histBuckets]uint64
	n      uint64
	max    int64
	sum    int64
}

const (
	histSubBits = 6
	histSub     = 1 << histSubBits
	// 58 magnitudes of 64 sub-buckets cover every positive int64 nanosecond.
	histBuckets = (64 - histSubBits) * histSub
)

func histIndex(v int64) int {
	if v < 0 {
		v = 0
	}
	u := uint64(v)
	shift := bits.Len64(u) - (histSubBits + 1)
	if shift <= 0 {
		return int(u)
	}
	return shift*histSub + int(u>>uint(shift))
}

// histBounds returns the smallest and largest value that map to index i.
func histBounds(i int) (lo, hi int64) {
	if i < 2*histSub {
		return int64(i), int64(i)
	}
	shift := i/histSub - 1
	mant := int64(i - shift*histSub)
	return mant << uint(shift), (mant+1)<<uint(shift) - 1
}

// Record adds one latency.
func (h *Histogram) Record(d time.Duration) {
	v := int64(d)
	if v < 0 {
		// A watch event can arrive before its writer saw the acknowledgement;
		// its delivery latency is then zero, not negative.
		v = 0
	}
	h.counts[histIndex(v)]++
	h.n++
	h.sum += v
	if v > h.max {
		h.max = v
	}
}

// Merge adds every value of o to h.
func (h *Histogram) Merge(o *Histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
	if o.max > h.max {
		h.max = o.max
	}
}

// Count is the number of recorded values.
func (h *Histogram) Count() uint64 { return h.n }

// Percentile returns the value below which a fraction q (0..1) of the
// recorded values lie: the middle of the bucket that holds it, never more
// than the exact maximum.
func (h *Histogram) Percentile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n) + 0.5)
	if rank < 1 {
		rank = 1
	}
	if rank > h.n {
		rank = h.n
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			lo, hi := histBounds(i)
			return time.Duration(min(lo+(hi-lo)/2, h.max))
		}
	}
	return time.Duration(h.max)
}

// Max is the exact largest recorded value.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Mean is the exact average of the recorded values.
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum / int64(h.n))
}

// Ms converts a duration to fractional milliseconds for reports.
func Ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
