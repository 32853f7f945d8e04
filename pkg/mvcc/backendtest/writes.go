package backendtest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/kite-db/kite/pkg/mvcc"
)

func (h *harness) putLeases(ls ...mvcc.Lease) {
	h.t.Helper()
	h.write(func(tx mvcc.WriteTx) {
		for _, l := range ls {
			if err := tx.PutLease(context.Background(), l); err != nil {
				h.t.Fatalf("PutLease(%+v): %v", l, err)
			}
			h.m.leases[l.ID] = l.TTL
		}
	})
}

func (h *harness) deleteLease(id int64) {
	h.t.Helper()
	h.write(func(tx mvcc.WriteTx) {
		if err := tx.DeleteLease(context.Background(), id); err != nil {
			h.t.Fatalf("DeleteLease(%d): %v", id, err)
		}
		delete(h.m.leases, id)
	})
}

func leasesOf(t *testing.T, tx mvcc.ReadTx) []mvcc.Lease {
	t.Helper()
	ls, err := tx.Leases(context.Background())
	if err != nil {
		t.Fatalf("Leases: %v", err)
	}
	return ls
}

func leaseKeysOf(t *testing.T, tx mvcc.ReadTx, id int64) []string {
	t.Helper()
	keys, err := tx.LeaseKeys(context.Background(), id)
	if err != nil {
		t.Fatalf("LeaseKeys(%d): %v", id, err)
	}
	var out []string
	for _, k := range keys {
		out = append(out, string(k))
	}
	return out
}

func testLeases(t *testing.T, e env) {
	h := newHarness(t, e.open(t))
	h.putLeases(mvcc.Lease{ID: 5, TTL: 20}, mvcc.Lease{ID: 1, TTL: 10}, mvcc.Lease{ID: 3, TTL: 30})
	h.read(func(tx mvcc.ReadTx) {
		equal(t, "Leases", leasesOf(t, tx), []mvcc.Lease{{ID: 1, TTL: 10}, {ID: 3, TTL: 30}, {ID: 5, TTL: 20}})
	})
	h.putLeases(mvcc.Lease{ID: 3, TTL: 60}, mvcc.Lease{ID: 1 << 62, TTL: 1})
	h.deleteLease(1)
	h.read(func(tx mvcc.ReadTx) {
		equal(t, "Leases after replace and delete", leasesOf(t, tx),
			[]mvcc.Lease{{ID: 3, TTL: 60}, {ID: 5, TTL: 20}, {ID: 1 << 62, TTL: 1}})
		equal(t, "model", leasesOf(t, tx), h.m.leaseList())
		for _, want := range h.m.leaseList() {
			l, ok, err := tx.Lease(context.Background(), want.ID)
			if err != nil || !ok || l != want {
				t.Errorf("Lease(%d) = %+v, %v, %v; want %+v, true, nil", want.ID, l, ok, err, want)
			}
		}
		if l, ok, err := tx.Lease(context.Background(), 1); err != nil || ok {
			t.Errorf("Lease(1) of a deleted lease = %+v, %v, %v; want not found", l, ok, err)
		}
	})
}

func testLeaseKeys(t *testing.T, e env) {
	h := newHarness(t, e.open(t))
	h.putLeases(mvcc.Lease{ID: 3, TTL: 10}, mvcc.Lease{ID: 5, TTL: 10})
	h.commit(putLease("k1", "v", 5), putLease("k2", "v", 5), putLease("k3", "v", 3), putLease("k0", "v", 5))
	h.read(func(tx mvcc.ReadTx) {
		equal(t, "LeaseKeys(5)", leaseKeysOf(t, tx, 5), []string{"k0", "k1", "k2"})
		equal(t, "LeaseKeys(3)", leaseKeysOf(t, tx, 3), []string{"k3"})
		equal(t, "LeaseKeys(99)", leaseKeysOf(t, tx, 99), []string(nil))
		equal(t, "Get(k1).Lease", getOf(t, tx, "k1").Lease, int64(5))
	})
	h.commit(put("k1", "no lease"))   // a put without a lease detaches
	h.commit(del("k2"))               // a deleted key is not attached
	h.commit(putLease("k3", "v2", 5)) // moves from lease 3 to 5
	h.read(func(tx mvcc.ReadTx) {
		equal(t, "LeaseKeys(5) later", leaseKeysOf(t, tx, 5), []string{"k0", "k3"})
		equal(t, "LeaseKeys(3) later", leaseKeysOf(t, tx, 3), []string(nil))
		equal(t, "LeaseKeys(0)", leaseKeysOf(t, tx, 0), []string{"k1"})
		equal(t, "model", leaseKeysOf(t, tx, 5), h.m.leaseKeys(5))
		equal(t, "Get(k1).Lease", getOf(t, tx, "k1").Lease, int64(0))
	})
}

func testWriteSeesOwnWrites(t *testing.T, e env) {
	h := newHarness(t, e.open(t))
	h.commit(put("a", "1"), put("b", "1"))
	ctx := context.Background()
	h.write(func(tx mvcc.WriteTx) {
		a2 := KV{"a", 1, 2, 2, 4, "2"}
		if err := tx.Put(ctx, pb(a2), 0); err != nil {
			t.Fatalf("Put: %v", err)
		}
		if err := tx.Delete(ctx, []byte("b"), 2, 1); err != nil {
			t.Fatalf("Delete: %v", err)
		}
		equal(t, "Get(a) in tx", getOf(t, tx, "a"), &a2)
		equal(t, "Get(b) in tx", getOf(t, tx, "b"), (*KV)(nil))
		equal(t, "Range at 2 in tx", rangeOf(t, tx, all[0], all[1], 2, 0, false), []KV{a2})
		equal(t, "Range at 1 in tx", rangeOf(t, tx, all[0], all[1], 1, 0, false),
			[]KV{{"a", 1, 1, 1, 0, "1"}, {"b", 1, 1, 1, 0, "1"}})
		equal(t, "Count at 2 in tx", countOf(t, tx, all[0], all[1], 2), int64(1))
		equal(t, "Count at 1 in tx", countOf(t, tx, all[0], all[1], 1), int64(2))
		equal(t, "LeaseKeys(4) in tx", leaseKeysOf(t, tx, 4), []string{"a"})
		equal(t, "Changes(2, 2) in tx", changesOf(t, tx, 2, 2, 0, true), []Change{
			{Sub: 0, KV: a2, Prev: &KV{"a", 1, 1, 1, 0, "1"}},
			{Sub: 1, Deleted: true, KV: KV{Key: "b", Mod: 2}, Prev: &KV{"b", 1, 1, 1, 0, "1"}},
		})
		if err := tx.SetRevisions(ctx, 2, 1); err != nil {
			t.Fatalf("SetRevisions: %v", err)
		}
		equal(t, "Revisions in tx", revisionsOf(t, tx), [2]int64{2, 1})
		if err := tx.PutLease(ctx, mvcc.Lease{ID: 4, TTL: 9}); err != nil {
			t.Fatalf("PutLease: %v", err)
		}
		equal(t, "Leases in tx", leasesOf(t, tx), []mvcc.Lease{{ID: 4, TTL: 9}})
	})
	h.read(func(tx mvcc.ReadTx) {
		equal(t, "Revisions after commit", revisionsOf(t, tx), [2]int64{2, 1})
		equal(t, "Range after commit", rangeOf(t, tx, all[0], all[1], 2, 0, false), []KV{{"a", 1, 2, 2, 4, "2"}})
	})
}

func testRollback(t *testing.T, e env) {
	h := newHarness(t, e.open(t))
	h.putLeases(mvcc.Lease{ID: 1, TTL: 10})
	h.commit(putLease("a", "1", 1), put("b", "1"))
	h.commit(put("a", "2"))
	ctx := context.Background()
	tx, err := h.b.BeginWrite(ctx)
	if err != nil {
		t.Fatalf("BeginWrite: %v", err)
	}
	steps := []struct {
		name string
		err  error
	}{
		{"Put", tx.Put(ctx, pb(KV{"c", 3, 3, 1, 0, "x"}), 0)},
		{"Put overwrite", tx.Put(ctx, pb(KV{"a", 1, 3, 3, 0, "x"}), 1)},
		{"Delete", tx.Delete(ctx, []byte("b"), 3, 2)},
		{"SetRevisions", tx.SetRevisions(ctx, 3, 2)},
		{"PutLease", tx.PutLease(ctx, mvcc.Lease{ID: 2, TTL: 5})},
		{"DeleteLease", tx.DeleteLease(ctx, 1)},
	}
	for _, s := range steps {
		if s.err != nil {
			t.Fatalf("%s: %v", s.name, s.err)
		}
	}
	if _, err := tx.CompactBatch(ctx, 2, 1, 2); err != nil {
		t.Fatalf("CompactBatch: %v", err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatalf("Rollback: %v", err)
	}
	h.read(func(tx mvcc.ReadTx) {
		h.checkAgainstModel(tx, 1, [][2][]byte{all})
		equal(t, "LeaseKeys(1)", leaseKeysOf(t, tx, 1), []string(nil))
	})
	// The write lock was released: the next transaction can run and
	// reuses the revision the rolled back one had.
	h.commit(put("d", "1"))
	h.read(func(tx mvcc.ReadTx) { h.checkAgainstModel(tx, 1, [][2][]byte{all}) })
}

func testReadIsolation(t *testing.T, e env) {
	h := newHarness(t, e.open(t))
	h.commit(put("a", "1"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	before, err := h.b.BeginRead(ctx)
	if err != nil {
		t.Fatalf("BeginRead: %v", err)
	}
	defer before.Rollback()
	w, err := h.b.BeginWrite(ctx)
	if err != nil {
		t.Fatalf("BeginWrite: %v", err)
	}
	if err := w.Put(ctx, pb(KV{"a", 1, 2, 2, 0, "2"}), 0); err != nil {
		t.Fatalf("Put: %v", err)
	}
	if err := w.SetRevisions(ctx, 2, 0); err != nil {
		t.Fatalf("SetRevisions: %v", err)
	}
	// A reader started while the writer is open is not blocked by it and
	// does not see its uncommitted rows.
	during, err := h.b.BeginRead(ctx)
	if err != nil {
		t.Fatalf("BeginRead during write: %v", err)
	}
	defer during.Rollback()
	equal(t, "Revisions during write", revisionsOf(t, during), [2]int64{1, 0})
	equal(t, "Get(a) during write", getOf(t, during, "a"), &KV{"a", 1, 1, 1, 0, "1"})
	if err := w.Commit(); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	for name, tx := range map[string]mvcc.ReadTx{"before": before, "during": during} {
		equal(t, name+": Revisions after commit", revisionsOf(t, tx), [2]int64{1, 0})
		equal(t, name+": Get(a) after commit", getOf(t, tx, "a"), &KV{"a", 1, 1, 1, 0, "1"})
		equal(t, name+": Range at 1", rangeOf(t, tx, all[0], all[1], 1, 0, false), []KV{{"a", 1, 1, 1, 0, "1"}})
		equal(t, name+": Changes", changesOf(t, tx, 1, 10, 0, false), []Change{{KV: KV{"a", 1, 1, 1, 0, "1"}}})
	}
	h.read(func(tx mvcc.ReadTx) {
		equal(t, "new reader: Revisions", revisionsOf(t, tx), [2]int64{2, 0})
		equal(t, "new reader: Get(a)", getOf(t, tx, "a"), &KV{"a", 1, 2, 2, 0, "2"})
	})
}

func testReopen(t *testing.T, e env) {
	if e.reopen == nil {
		t.Skip("driver gave no reopen hook")
	}
	h := newHarness(t, e.open(t))
	h.putLeases(mvcc.Lease{ID: 7, TTL: 70})
	h.commit(putLease("a", "1", 7), put("b", "1"))
	h.commit(del("b"), put("c", "1"))
	h.m.compacted = 1
	h.commit(put("a", "2"))
	h.b = e.reopen(t, h.b)
	h.read(func(tx mvcc.ReadTx) {
		equal(t, "Revisions after reopen", revisionsOf(t, tx), [2]int64{3, 1})
		h.checkAgainstModel(tx, 1, [][2][]byte{all})
	})
	h.commit(put("d", "after reopen"))
	h.b = e.reopen(t, h.b)
	h.read(func(tx mvcc.ReadTx) { h.checkAgainstModel(tx, 1, [][2][]byte{all}) })
}

// testDeleteAndPutInOneRevision covers the one case of two rows of a key in a
// revision: a txn deleting a key through a from-key range, then putting it.
func testDeleteAndPutInOneRevision(t *testing.T, e env) {
	h := newHarness(t, e.open(t))
	first := h.commit(put("a", "1"), put("b", "1"))
	rev := h.commit(del("a"), del("b"), put("a", "2"))
	h.commit(put("c", "1"))
	h.read(func(tx mvcc.ReadTx) {
		equal(t, "Get(a)", getOf(t, tx, "a"), &KV{Key: "a", Create: rev, Mod: rev, Version: 1, Value: "2"})
		equal(t, "Changes with prev", changesOf(t, tx, rev, rev, 0, true), []Change{
			{Sub: 0, Deleted: true, KV: KV{Key: "a", Mod: rev}, Prev: &KV{Key: "a", Create: first, Mod: first, Version: 1, Value: "1"}},
			{Sub: 1, Deleted: true, KV: KV{Key: "b", Mod: rev}, Prev: &KV{Key: "b", Create: first, Mod: first, Version: 1, Value: "1"}},
			{Sub: 2, KV: KV{Key: "a", Create: rev, Mod: rev, Version: 1, Value: "2"}},
		})
		h.checkAgainstModel(tx, 1, sweepSpans)
	})
	if got, want := h.compact(rev, 10), h.m.compact(rev); got != want {
		t.Errorf("compaction removed %d rows, want %d", got, want)
	}
	h.read(func(tx mvcc.ReadTx) { h.checkAgainstModel(tx, rev, sweepSpans) })
}

func testAlarms(t *testing.T, e env) {
	h := newHarness(t, e.open(t))
	nospace := &etcdserverpb.AlarmMember{MemberID: 7, Alarm: etcdserverpb.AlarmType_NOSPACE}
	high := &etcdserverpb.AlarmMember{MemberID: 1<<63 + 5, Alarm: etcdserverpb.AlarmType_NOSPACE}
	corrupt := &etcdserverpb.AlarmMember{MemberID: 3, Alarm: etcdserverpb.AlarmType_CORRUPT}
	h.write(func(tx mvcc.WriteTx) {
		for _, a := range []*etcdserverpb.AlarmMember{nospace, corrupt, nospace, high} {
			if err := tx.PutAlarm(context.Background(), a); err != nil {
				t.Fatalf("PutAlarm(%v): %v", a, err)
			}
		}
	})
	h.read(func(tx mvcc.ReadTx) {
		equal(t, "Alarms", alarmsOf(t, tx), []string{"9223372036854775813/NOSPACE", "3/CORRUPT", "7/NOSPACE"})
	})
	h.write(func(tx mvcc.WriteTx) {
		for _, a := range []*etcdserverpb.AlarmMember{corrupt, high, {MemberID: 9, Alarm: etcdserverpb.AlarmType_NOSPACE}} {
			if err := tx.DeleteAlarm(context.Background(), a); err != nil {
				t.Fatalf("DeleteAlarm(%v): %v", a, err)
			}
		}
		equal(t, "Alarms inside the write", alarmsOf(t, tx), []string{"7/NOSPACE"})
	})
	h.read(func(tx mvcc.ReadTx) {
		equal(t, "Alarms after delete", alarmsOf(t, tx), []string{"7/NOSPACE"})
	})
	if e.reopen != nil {
		h.b = e.reopen(t, h.b)
		h.read(func(tx mvcc.ReadTx) {
			equal(t, "Alarms after reopen", alarmsOf(t, tx), []string{"7/NOSPACE"})
		})
	}
}

func alarmsOf(t *testing.T, tx mvcc.ReadTx) []string {
	t.Helper()
	as, err := tx.Alarms(context.Background())
	if err != nil {
		t.Fatalf("Alarms: %v", err)
	}
	var out []string
	for _, a := range as {
		out = append(out, fmt.Sprintf("%d/%s", a.MemberID, a.Alarm))
	}
	return out
}
