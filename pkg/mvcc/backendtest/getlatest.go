package backendtest

import (
	"context"
	"testing"

	"github.com/kite-db/kite/pkg/mvcc"
)

// getLatestOf calls Backend.GetLatest.
func (h *harness) getLatestOf(key string) (*KV, [2]int64) {
	h.t.Helper()
	kv, current, compacted, err := h.b.GetLatest(context.Background(), []byte(key))
	if err != nil {
		h.t.Fatalf("GetLatest(%q): %v", key, err)
	}
	if kv == nil {
		return nil, [2]int64{current, compacted}
	}
	p := plainKV(kv)
	return &p, [2]int64{current, compacted}
}

// testGetLatest checks that GetLatest answers what a read transaction
// started at the same moment answers: the live row and the revisions.
func testGetLatest(t *testing.T, e env) {
	h := newHarness(t, e.open(t))
	check := func(when string, keys ...string) {
		t.Helper()
		h.read(func(tx mvcc.ReadTx) {
			for _, k := range keys {
				kv, revs := h.getLatestOf(k)
				equal(t, when+": GetLatest("+k+") row", kv, getOf(t, tx, k))
				equal(t, when+": GetLatest("+k+") revisions", revs, revisionsOf(t, tx))
			}
		})
	}
	check("empty store", "a")
	h.commit(put("a", "1"), put("bin", "\x00\xff\x00"), put("empty", ""))
	check("after puts", "a", "bin", "empty", "missing")
	h.commit(putLease("a", "2", 7))
	check("after overwrite", "a")
	equal(t, "GetLatest(a)", func() *KV { kv, _ := h.getLatestOf("a"); return kv }(),
		&KV{Key: "a", Create: 1, Mod: 2, Version: 2, Lease: 7, Value: "2"})
	h.commit(del("a"))
	check("after delete", "a", "bin")
	h.write(func(tx mvcc.WriteTx) {
		if err := tx.SetRevisions(context.Background(), 3, 2); err != nil {
			t.Fatalf("SetRevisions: %v", err)
		}
	})
	_, revs := h.getLatestOf("bin")
	equal(t, "GetLatest revisions after compaction", revs, [2]int64{3, 2})
	check("after compaction", "bin", "a")
}
