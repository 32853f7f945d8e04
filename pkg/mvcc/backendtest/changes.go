package backendtest

import (
	"testing"

	"github.com/kite-db/kite/pkg/mvcc"
)

// changesHistory writes: 1 put a, put b; 2 put a; 3 del b, put c; 4 del a;
// 5 put a.
func changesHistory(h *harness) {
	h.commit(put("a", "a1"), putLease("b", "b1", 9))
	h.commit(put("a", "a2"))
	h.commit(del("b"), put("c", "c3"))
	h.commit(del("a"))
	h.commit(put("a", "a5"))
}

func testChanges(t *testing.T, e env) {
	h := newHarness(t, e.open(t))
	changesHistory(h)
	a1 := KV{"a", 1, 1, 1, 0, "a1"}
	b1 := KV{"b", 1, 1, 1, 9, "b1"}
	a2 := KV{"a", 1, 2, 2, 0, "a2"}
	c3 := KV{"c", 3, 3, 1, 0, "c3"}
	a5 := KV{"a", 5, 5, 1, 0, "a5"}
	want := []Change{
		{Sub: 0, KV: a1},
		{Sub: 1, KV: b1},
		{Sub: 0, KV: a2},
		{Sub: 0, Deleted: true, KV: KV{Key: "b", Mod: 3}},
		{Sub: 1, KV: c3},
		{Sub: 0, Deleted: true, KV: KV{Key: "a", Mod: 4}},
		{Sub: 0, KV: a5},
	}
	h.read(func(tx mvcc.ReadTx) {
		equal(t, "Changes(1, 5)", changesOf(t, tx, 1, 5, 0, false), want)
		equal(t, "Changes(1, 100)", changesOf(t, tx, 1, 100, 0, false), want)
		equal(t, "Changes(2, 3)", changesOf(t, tx, 2, 3, 0, false), want[2:5])
		equal(t, "Changes(3, 3)", changesOf(t, tx, 3, 3, 0, false), want[3:5])
		equal(t, "Changes(1, 5) limit 3", changesOf(t, tx, 1, 5, 3, false), want[:3])
		equal(t, "Changes(3, 5) limit 1", changesOf(t, tx, 3, 5, 1, false), want[3:4])
		equal(t, "Changes(6, 9)", changesOf(t, tx, 6, 9, 0, false), []Change(nil))
		equal(t, "Changes(4, 2)", changesOf(t, tx, 4, 2, 0, false), []Change(nil))
		equal(t, "Changes model", changesOf(t, tx, 1, 5, 0, false), h.m.changes(1, 5, false))
	})
}

func testChangesWithPrev(t *testing.T, e env) {
	h := newHarness(t, e.open(t))
	changesHistory(h)
	a1 := KV{"a", 1, 1, 1, 0, "a1"}
	b1 := KV{"b", 1, 1, 1, 9, "b1"}
	a2 := KV{"a", 1, 2, 2, 0, "a2"}
	c3 := KV{"c", 3, 3, 1, 0, "c3"}
	a5 := KV{"a", 5, 5, 1, 0, "a5"}
	want := []Change{
		{Sub: 0, KV: a1},            // first put: no prev
		{Sub: 1, KV: b1},            // first put: no prev
		{Sub: 0, KV: a2, Prev: &a1}, // overwrite
		{Sub: 0, Deleted: true, KV: KV{Key: "b", Mod: 3}, Prev: &b1}, // delete
		{Sub: 1, KV: c3}, // first put
		{Sub: 0, Deleted: true, KV: KV{Key: "a", Mod: 4}, Prev: &a2},
		{Sub: 0, KV: a5}, // put after delete: prev is a tombstone
	}
	h.read(func(tx mvcc.ReadTx) {
		equal(t, "Changes(1, 5) withPrev", changesOf(t, tx, 1, 5, 0, true), want)
		// The previous row is found even when it is outside the window.
		equal(t, "Changes(4, 5) withPrev", changesOf(t, tx, 4, 5, 0, true), want[5:])
		equal(t, "Changes(2, 3) withPrev limit 2", changesOf(t, tx, 2, 3, 2, true), want[2:4])
		equal(t, "Changes model", changesOf(t, tx, 1, 5, 0, true), h.m.changes(1, 5, true))
	})
}
