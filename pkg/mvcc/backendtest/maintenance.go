package backendtest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/kite-db/kite/pkg/mvcc"
)

// randomHistory writes revs revisions of 1 to 3 changes each over a small
// key space, so keys are created, overwritten, deleted and recreated.
func randomHistory(h *harness, rng *rand.Rand, revs int) {
	keys := []string{"a", "a\x00", "ab", "b", "b/1", "b/2", "c", "d\xff", "e", "f"}
	for range revs {
		n := 1 + rng.IntN(3)
		touched := map[string]bool{}
		var ops []op
		for range n {
			k := keys[rng.IntN(len(keys))]
			if touched[k] {
				continue
			}
			touched[k] = true
			if h.m.live(k) != nil && rng.IntN(3) == 0 {
				ops = append(ops, del(k))
				continue
			}
			ops = append(ops, putLease(k, fmt.Sprintf("%s@%d", k, h.m.current+1), int64(rng.IntN(3))))
		}
		h.commit(ops...)
	}
}

var sweepSpans = [][2][]byte{
	all,
	{[]byte("a"), nil},
	{[]byte("a"), []byte("b")},
	{[]byte("b/"), []byte("b0")},
	{[]byte("ab"), []byte{0}},
	{[]byte("c"), []byte("f")},
}

// compact walks CompactBatch over every revision up to compacted in batches
// of step revisions, as the Store does, and returns the rows removed.
func (h *harness) compact(compacted, step int64) int64 {
	h.t.Helper()
	var removed int64
	h.write(func(tx mvcc.WriteTx) {
		for from := int64(1); from <= compacted; from += step {
			n, err := tx.CompactBatch(context.Background(), compacted, from, min(from+step-1, compacted))
			if err != nil {
				h.t.Fatalf("CompactBatch(%d, %d, %d): %v", compacted, from, from+step-1, err)
			}
			removed += n
		}
		if err := tx.SetRevisions(context.Background(), h.m.current, compacted); err != nil {
			h.t.Fatalf("SetRevisions: %v", err)
		}
	})
	return removed
}

func testCompact(t *testing.T, e env) {
	h := newHarness(t, e.open(t))
	h.commit(put("a", "1"))
	h.commit(put("a", "2"))
	h.commit(del("a"))
	h.commit(put("b", "4"))
	h.commit(put("b", "5"))
	if got, want := h.compact(4, 1), int64(3); got != want {
		t.Errorf("removed %d rows, want %d (a@1, a@2 and the tombstone a@3)", got, want)
	}
	h.m.compact(4)
	h.read(func(tx mvcc.ReadTx) {
		equal(t, "Changes after compaction", changesOf(t, tx, 1, 5, 0, true), []Change{
			{KV: KV{"b", 4, 4, 1, 0, "4"}},
			{KV: KV{"b", 4, 5, 2, 0, "5"}, Prev: &KV{"b", 4, 4, 1, 0, "4"}},
		})
		h.checkAgainstModel(tx, 4, sweepSpans)
	})

	h = newHarness(t, e.open(t))
	randomHistory(h, rand.New(rand.NewPCG(7, 11)), 40)
	const compacted = 25
	before := map[int64][]KV{}
	var changesAbove []Change
	h.read(func(tx mvcc.ReadTx) {
		for rev := int64(compacted); rev <= h.m.current; rev++ {
			before[rev] = rangeOf(t, tx, all[0], all[1], rev, 0, false)
		}
		changesAbove = changesOf(t, tx, compacted+1, h.m.current, 0, true)
	})
	got := h.compact(compacted, 4)
	want := h.m.compact(compacted)
	if got != want || want == 0 {
		t.Errorf("removed %d rows, want %d", got, want)
	}
	h.read(func(tx mvcc.ReadTx) {
		for rev := int64(compacted); rev <= h.m.current; rev++ {
			equal(t, fmt.Sprintf("Range at %d after compaction", rev), rangeOf(t, tx, all[0], all[1], rev, 0, false), before[rev])
		}
		equal(t, "Changes above compacted", changesOf(t, tx, compacted+1, h.m.current, 0, true), changesAbove)
		h.checkAgainstModel(tx, compacted, sweepSpans)
	})
}

// testCompactTwice checks that rows kept by a first compaction (then live)
// are removed by a later one that supersedes them.
func testCompactTwice(t *testing.T, e env) {
	h := newHarness(t, e.open(t))
	rng := rand.New(rand.NewPCG(3, 5))
	randomHistory(h, rng, 20)
	if got, want := h.compact(10, 3), h.m.compact(10); got != want {
		t.Errorf("first compaction removed %d rows, want %d", got, want)
	}
	randomHistory(h, rng, 20)
	if got, want := h.compact(30, 7), h.m.compact(30); got != want {
		t.Errorf("second compaction removed %d rows, want %d", got, want)
	}
	if got := h.compact(30, 30); got != 0 {
		t.Errorf("repeated compaction removed %d rows, want 0", got)
	}
	h.read(func(tx mvcc.ReadTx) { h.checkAgainstModel(tx, 30, sweepSpans) })
}

func testSnapshot(t *testing.T, e env) {
	h := newHarness(t, e.open(t))
	h.putLeases(mvcc.Lease{ID: 1, TTL: 10}, mvcc.Lease{ID: 2, TTL: 20})
	randomHistory(h, rand.New(rand.NewPCG(1, 1)), 30)
	h.compact(10, 5)
	h.m.compact(10)
	h.commit(put("big", strings.Repeat("v", 256<<10)))
	var buf bytes.Buffer
	rc, size, err := h.b.Snapshot(context.Background())
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	if _, err := io.Copy(&buf, rc); err != nil {
		t.Fatalf("read snapshot: %v", err)
	}
	if err := rc.Close(); err != nil {
		t.Fatalf("close snapshot: %v", err)
	}
	if int64(buf.Len()) != size {
		t.Fatalf("Snapshot announced %d bytes, read %d", size, buf.Len())
	}
	if buf.Len() == 0 {
		t.Fatalf("Snapshot wrote nothing")
	}
	// The source stays usable.
	h.commit(put("after", "snapshot"))
	h.read(func(tx mvcc.ReadTx) { h.checkAgainstModel(tx, 10, sweepSpans) })
	if e.restore == nil {
		t.Skip("driver gave no restore hook")
	}
	m := h.m.clone()
	m.rows = m.rows[:len(m.rows)-1]
	m.current--
	r := &harness{t: t, b: e.restore(t, &buf), m: m}
	r.read(func(tx mvcc.ReadTx) { r.checkAgainstModel(tx, 10, sweepSpans) })
	r.commit(put("restored", "writable"))
	r.read(func(tx mvcc.ReadTx) { r.checkAgainstModel(tx, 10, sweepSpans) })
}

func testSizeDefragment(t *testing.T, e env) {
	h := newHarness(t, e.open(t))
	value := strings.Repeat("x", 1024)
	for i := range 10 {
		var ops []op
		for j := range 20 {
			ops = append(ops, put(fmt.Sprintf("k%02d/%02d", i, j), value))
		}
		h.commit(ops...)
	}
	size, inUse, err := h.b.Size(context.Background())
	if err != nil {
		t.Fatalf("Size: %v", err)
	}
	if size <= 0 || inUse <= 0 || inUse > size {
		t.Errorf("Size = %d, %d; want 0 < inUse <= size", size, inUse)
	}
	for i := range 10 {
		var ops []op
		for j := range 20 {
			ops = append(ops, del(fmt.Sprintf("k%02d/%02d", i, j)))
		}
		h.commit(ops...)
	}
	h.commit(put("survivor", "1"))
	h.compact(h.m.current, 100)
	h.m.compact(h.m.current)
	if err := h.b.Defragment(context.Background()); err != nil {
		t.Fatalf("Defragment: %v", err)
	}
	size, inUse, err = h.b.Size(context.Background())
	if err != nil {
		t.Fatalf("Size after defragment: %v", err)
	}
	if size <= 0 || inUse <= 0 || inUse > size {
		t.Errorf("Size after defragment = %d, %d; want 0 < inUse <= size", size, inUse)
	}
	h.read(func(tx mvcc.ReadTx) { h.checkAgainstModel(tx, h.m.current, [][2][]byte{all}) })
	h.commit(put("after", "defragment"))
	h.read(func(tx mvcc.ReadTx) { h.checkAgainstModel(tx, h.m.compacted, [][2][]byte{all}) })
}

func testModelSweep(t *testing.T, e env) {
	h := newHarness(t, e.open(t))
	h.putLeases(mvcc.Lease{ID: 1, TTL: 10}, mvcc.Lease{ID: 2, TTL: 20})
	rng := rand.New(rand.NewPCG(42, 42))
	randomHistory(h, rng, 60)
	h.read(func(tx mvcc.ReadTx) {
		h.checkAgainstModel(tx, 1, sweepSpans)
		for from := int64(1); from <= h.m.current; from += 7 {
			for _, limit := range []int{1, 5} {
				want := h.m.changes(from, h.m.current, true)
				if len(want) > limit {
					want = want[:limit]
				}
				equal(t, fmt.Sprintf("Changes(%d, current) limit %d", from, limit),
					changesOf(t, tx, from, h.m.current, limit, true), want)
			}
		}
		for _, id := range []int64{0, 1, 2} {
			equal(t, fmt.Sprintf("LeaseKeys(%d)", id), leaseKeysOf(t, tx, id), h.m.leaseKeys(id))
		}
	})
}
