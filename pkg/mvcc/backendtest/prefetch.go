package backendtest

import (
	"context"
	"testing"

	"github.com/kite-db/kite/pkg/mvcc"
)

// testPrefetch: a write transaction begun with keys prefetched answers exactly as
// without prefetching, before and after the transaction's own writes, and
// after its pending writes were sent by an unrelated read.
func testPrefetch(t *testing.T, e env) {
	h := newHarness(t, e.open(t))
	h.commit(put("a", "a1"), put("b", "b1"), put("c", "c1"))
	h.commit(put("a", "a2"))
	ctx := context.Background()
	pf, ok := h.b.(mvcc.Prefetcher)
	if !ok {
		t.Skip("this driver does not prefetch")
	}
	tx, err := pf.BeginWritePrefetch(ctx, [][]byte{[]byte("a"), []byte("missing"), []byte("b")})
	if err != nil {
		t.Fatalf("BeginWritePrefetch: %v", err)
	}
	defer tx.Rollback()
	rev := h.m.current
	check := func(when string) {
		t.Helper()
		for _, k := range []string{"a", "b", "c", "missing"} {
			equal(t, when+": Get("+k+")", getOf(t, tx, k), h.m.live(k))
			want := h.m.rangeAt([]byte(k), nil, rev)
			equal(t, when+": Range("+k+")", rangeOf(t, tx, []byte(k), nil, rev, 0, false), want)
			equal(t, when+": Range("+k+", keys only)", rangeOf(t, tx, []byte(k), nil, rev, 0, true), keysOnly(want))
		}
	}
	check("after prefetch")

	// The transaction's own writes, as the harness would commit them.
	rev++
	a := KV{Key: "a", Create: 2, Mod: rev, Version: 3, Value: "a3"}
	if err := tx.Put(ctx, pb(a), 0); err != nil {
		t.Fatal(err)
	}
	if err := tx.Delete(ctx, []byte("b"), rev, 1); err != nil {
		t.Fatal(err)
	}
	h.m.rows = append(h.m.rows, row{Sub: 0, KV: a}, row{Sub: 1, Deleted: true, KV: KV{Key: "b", Mod: rev}})
	h.m.current = rev
	check("after writes")
	// An open range read sends the pending writes; what is known must stay true.
	equal(t, "Range(all)", rangeOf(t, tx, []byte("a"), []byte{0}, rev, 0, false), h.m.rangeAt([]byte("a"), []byte{0}, rev))
	check("after the writes were sent")
}
