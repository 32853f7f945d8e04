package backendtest

import (
	"fmt"
	"testing"

	"github.com/kite-db/kite/pkg/mvcc"
)

func testEmptyStore(t *testing.T, e env) {
	h := newHarness(t, e.open(t))
	h.read(func(tx mvcc.ReadTx) {
		equal(t, "Revisions", revisionsOf(t, tx), [2]int64{0, 0})
		equal(t, "Range all", rangeOf(t, tx, all[0], all[1], 1, 0, false), []KV(nil))
		equal(t, "Count all", countOf(t, tx, all[0], all[1], 1), int64(0))
		equal(t, "Get", getOf(t, tx, "a"), (*KV)(nil))
		equal(t, "Changes", changesOf(t, tx, 1, 10, 0, true), []Change(nil))
		h.checkAgainstModel(tx, 1, [][2][]byte{all})
	})
}

func testPutGetOverwrite(t *testing.T, e env) {
	h := newHarness(t, e.open(t))
	h.commit(put("a", "1"), put("bin", "\x00\xff\x00"), put("empty", ""))
	h.read(func(tx mvcc.ReadTx) {
		equal(t, "Get(a)", getOf(t, tx, "a"), &KV{Key: "a", Create: 1, Mod: 1, Version: 1, Value: "1"})
		equal(t, "Get(bin)", getOf(t, tx, "bin"), &KV{Key: "bin", Create: 1, Mod: 1, Version: 1, Value: "\x00\xff\x00"})
		equal(t, "Get(empty)", getOf(t, tx, "empty"), &KV{Key: "empty", Create: 1, Mod: 1, Version: 1})
		equal(t, "Get(missing)", getOf(t, tx, "b"), (*KV)(nil))
	})
	h.commit(put("a", "2"))
	h.commit(put("a", "3"))
	h.read(func(tx mvcc.ReadTx) {
		want := KV{Key: "a", Create: 1, Mod: 3, Version: 3, Value: "3"}
		equal(t, "Get(a) after overwrites", getOf(t, tx, "a"), &want)
		equal(t, "Range(a) current", rangeOf(t, tx, []byte("a"), nil, 3, 0, false), []KV{want})
		equal(t, "Range(a) at 2", rangeOf(t, tx, []byte("a"), nil, 2, 0, false),
			[]KV{{Key: "a", Create: 1, Mod: 2, Version: 2, Value: "2"}})
		equal(t, "Range(a) at 1", rangeOf(t, tx, []byte("a"), nil, 1, 0, false),
			[]KV{{Key: "a", Create: 1, Mod: 1, Version: 1, Value: "1"}})
		h.checkAgainstModel(tx, 1, [][2][]byte{all})
	})
}

func testDeleteHidesKey(t *testing.T, e env) {
	h := newHarness(t, e.open(t))
	h.commit(put("a", "1"), put("b", "1"))
	h.commit(del("a"))
	h.read(func(tx mvcc.ReadTx) {
		equal(t, "Get(a) after delete", getOf(t, tx, "a"), (*KV)(nil))
	})
	h.commit(put("a", "again"))
	h.commit(put("c", "1"))
	h.read(func(tx mvcc.ReadTx) {
		a1 := KV{Key: "a", Create: 1, Mod: 1, Version: 1, Value: "1"}
		a3 := KV{Key: "a", Create: 3, Mod: 3, Version: 1, Value: "again"}
		b1 := KV{Key: "b", Create: 1, Mod: 1, Version: 1, Value: "1"}
		c4 := KV{Key: "c", Create: 4, Mod: 4, Version: 1, Value: "1"}
		equal(t, "Range at 1", rangeOf(t, tx, all[0], all[1], 1, 0, false), []KV{a1, b1})
		equal(t, "Range at 2", rangeOf(t, tx, all[0], all[1], 2, 0, false), []KV{b1})
		equal(t, "Range(a) at 2", rangeOf(t, tx, []byte("a"), nil, 2, 0, false), []KV(nil))
		equal(t, "Range at 3", rangeOf(t, tx, all[0], all[1], 3, 0, false), []KV{a3, b1})
		equal(t, "Range at 4", rangeOf(t, tx, all[0], all[1], 4, 0, false), []KV{a3, b1, c4})
		equal(t, "Get(a) recreated", getOf(t, tx, "a"), &a3)
		h.checkAgainstModel(tx, 1, [][2][]byte{all})
	})
}

func testHistoricalRange(t *testing.T, e env) {
	h := newHarness(t, e.open(t))
	h.commit(put("a", "a1"), put("b", "b1"), put("c", "c1"))
	h.commit(put("b", "b2"))
	h.commit(del("a"), put("c", "c3"))
	h.commit(put("d", "d4"), del("b"))
	h.commit(put("a", "a5"))
	h.commit(put("zz", "unrelated"))
	h.read(func(tx mvcc.ReadTx) {
		span := [2][]byte{[]byte("a"), []byte("e")}
		want := map[int64][]KV{
			1: {{"a", 1, 1, 1, 0, "a1"}, {"b", 1, 1, 1, 0, "b1"}, {"c", 1, 1, 1, 0, "c1"}},
			2: {{"a", 1, 1, 1, 0, "a1"}, {"b", 1, 2, 2, 0, "b2"}, {"c", 1, 1, 1, 0, "c1"}},
			3: {{"b", 1, 2, 2, 0, "b2"}, {"c", 1, 3, 2, 0, "c3"}},
			4: {{"c", 1, 3, 2, 0, "c3"}, {"d", 4, 4, 1, 0, "d4"}},
			5: {{"a", 5, 5, 1, 0, "a5"}, {"c", 1, 3, 2, 0, "c3"}, {"d", 4, 4, 1, 0, "d4"}},
			6: {{"a", 5, 5, 1, 0, "a5"}, {"c", 1, 3, 2, 0, "c3"}, {"d", 4, 4, 1, 0, "d4"}},
		}
		for rev := int64(1); rev <= 6; rev++ {
			equal(t, fmt.Sprintf("Range [a, e) at rev %d", rev), rangeOf(t, tx, span[0], span[1], rev, 0, false), want[rev])
		}
		h.checkAgainstModel(tx, 1, [][2][]byte{all, span, {[]byte("b"), nil}})
	})
}

func testLimit(t *testing.T, e env) {
	h := newHarness(t, e.open(t))
	keys := []string{"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7"}
	var ops []op
	for _, k := range keys {
		ops = append(ops, put(k, "v"))
	}
	h.commit(ops...)
	h.commit(del("k0"), del("k1"), del("k3"))
	h.commit(put("k9", "v"))
	h.read(func(tx mvcc.ReadTx) {
		for _, rev := range []int64{1, 2, 3} {
			for _, limit := range []int64{0, 1, 2, 3, 5, 100} {
				want := limited(h.m.rangeAt(all[0], all[1], rev), limit)
				got := rangeOf(t, tx, all[0], all[1], rev, limit, false)
				if equal(t, "Range limited", got, want) && limit > 0 && int64(len(got)) > limit {
					t.Errorf("rev %d limit %d: got %d rows", rev, limit, len(got))
				}
			}
		}
		// Tombstones before the limit must not use it up.
		equal(t, "first 2 at rev 2", rangeOf(t, tx, all[0], all[1], 2, 2, true),
			[]KV{{"k2", 1, 1, 1, 0, ""}, {"k4", 1, 1, 1, 0, ""}})
	})
}

func testKeysOnly(t *testing.T, e env) {
	h := newHarness(t, e.open(t))
	h.commit(putLease("a", "value-a", 7), put("b", "value-b"))
	h.commit(put("a", "value-a2"))
	h.read(func(tx mvcc.ReadTx) {
		for _, rev := range []int64{1, 2} {
			got := rangeOf(t, tx, all[0], all[1], rev, 0, true)
			equal(t, "keysOnly", got, keysOnly(h.m.rangeAt(all[0], all[1], rev)))
			if len(got) == 0 || got[0].Mod == 0 || got[0].Create == 0 || got[0].Version == 0 {
				t.Errorf("keysOnly at %d dropped metadata: %+v", rev, got)
			}
		}
		equal(t, "keysOnly lease at 1", rangeOf(t, tx, []byte("a"), nil, 1, 0, true)[0].Lease, int64(7))
	})
}

func testCount(t *testing.T, e env) {
	h := newHarness(t, e.open(t))
	h.commit(put("a", "1"), put("b", "1"), put("c", "1"), put("d", "1"))
	h.commit(del("b"))
	h.commit(put("b", "2"), del("c"), put("e", "1"))
	h.commit(put("a", "2"))
	h.read(func(tx mvcc.ReadTx) {
		cases := []struct {
			key, end string
			rev      int64
			want     int64
		}{
			{"", "\x00", 1, 4}, {"", "\x00", 2, 3}, {"", "\x00", 3, 4}, {"", "\x00", 4, 4},
			{"b", "d", 1, 2}, {"b", "d", 2, 1}, {"b", "d", 3, 1}, {"b", "d", 4, 1},
			{"c", "", 1, 1}, {"c", "", 3, 0}, {"e", "", 2, 0}, {"e", "", 4, 1},
			{"b", "\x00", 2, 2}, {"x", "\x00", 4, 0},
		}
		for _, c := range cases {
			var end []byte
			if c.end != "" {
				end = []byte(c.end)
			}
			if got := countOf(t, tx, []byte(c.key), end, c.rev); got != c.want {
				t.Errorf("Count(%q, %q, %d) = %d, want %d", c.key, c.end, c.rev, got, c.want)
			}
		}
	})
}

func testRangeEnd(t *testing.T, e env) {
	h := newHarness(t, e.open(t))
	keys := []string{"\x00", "a", "a\x00", "ab", "a\xff", "b", "\xff"} // bytewise order
	var ops []op
	for _, k := range keys {
		ops = append(ops, put(k, "v:"+k))
	}
	h.commit(ops...)
	h.commit(put("zz", "later")) // makes rev 1 a historical read
	names := func(kvs []KV) []string {
		var out []string
		for _, kv := range kvs {
			out = append(out, kv.Key)
		}
		return out
	}
	cases := []struct {
		name     string
		key, end []byte
		want     []string
	}{
		{"single key", []byte("a"), nil, []string{"a"}},
		{"single key, empty end", []byte("a"), []byte{}, []string{"a"}},
		{"single missing key", []byte("a\x01"), nil, nil},
		{"all from a", []byte("a"), []byte{0}, []string{"a", "a\x00", "ab", "a\xff", "b", "\xff"}},
		{"all keys, empty key", []byte{}, []byte{0}, keys},
		{"all keys, nil key", nil, []byte{0}, keys},
		{"prefix a", []byte("a"), []byte("b"), []string{"a", "a\x00", "ab", "a\xff"}},
		{"[a\\x00, a\\xff)", []byte("a\x00"), []byte("a\xff"), []string{"a\x00", "ab"}},
		{"end before key", []byte("b"), []byte("a"), nil},
		{"end equals key", []byte("b"), []byte("b"), nil},
		{"after every key", []byte("\xff\xff"), []byte{0}, nil},
	}
	h.read(func(tx mvcc.ReadTx) {
		for _, rev := range []int64{1, 2} {
			for _, c := range cases {
				want := c.want
				if rev == 2 && len(c.end) == 1 && c.end[0] == 0 && string(c.key) < "zz" {
					want = append(append([]string(nil), want[:len(want)-1]...), "zz", "\xff")
				}
				got := rangeOf(t, tx, c.key, c.end, rev, 0, false)
				equal(t, fmt.Sprintf("%s at rev %d", c.name, rev), names(got), want)
				equal(t, c.name+" model", got, h.m.rangeAt(c.key, c.end, rev))
				equal(t, c.name+" count", countOf(t, tx, c.key, c.end, rev), int64(len(want)))
			}
		}
	})
}
