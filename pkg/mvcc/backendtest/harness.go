package backendtest

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/kite-db/kite/pkg/mvcc"
)

// op is one change of a revision written by harness.commit.
type op struct {
	key, value string
	lease      int64
	del        bool
}

func put(key, value string) op                { return op{key: key, value: value} }
func putLease(key, value string, id int64) op { return op{key: key, value: value, lease: id} }
func del(key string) op                       { return op{key: key, del: true} }

// harness drives a backend the way the Store does and mirrors every write
// into the reference model.
type harness struct {
	t *testing.T
	b mvcc.Backend
	m *model
}

func newHarness(t *testing.T, b mvcc.Backend) *harness {
	return &harness{t: t, b: b, m: newModel()}
}

// commit writes ops as the next revision, computing create revision and
// version as mvcc does, and returns the revision.
func (h *harness) commit(ops ...op) int64 {
	h.t.Helper()
	ctx := context.Background()
	tx, err := h.b.BeginWrite(ctx)
	if err != nil {
		h.t.Fatalf("BeginWrite: %v", err)
	}
	rev := h.m.current + 1
	for sub, o := range ops {
		// A key may be deleted and put again in one revision, as etcd allows.
		prev := h.m.last(o.key)
		if o.del {
			if prev == nil {
				h.t.Fatalf("test bug: delete of missing key %q", o.key)
			}
			if err := tx.Delete(ctx, []byte(o.key), rev, int64(sub)); err != nil {
				h.t.Fatalf("Delete(%q): %v", o.key, err)
			}
			h.m.rows = append(h.m.rows, row{Sub: int64(sub), Deleted: true, KV: KV{Key: o.key, Mod: rev}})
			continue
		}
		kv := KV{Key: o.key, Create: rev, Mod: rev, Version: 1, Lease: o.lease, Value: o.value}
		if prev != nil {
			kv.Create, kv.Version = prev.Create, prev.Version+1
		}
		if err := tx.Put(ctx, pb(kv), int64(sub)); err != nil {
			h.t.Fatalf("Put(%q): %v", o.key, err)
		}
		h.m.rows = append(h.m.rows, row{Sub: int64(sub), KV: kv})
	}
	if err := tx.SetRevisions(ctx, rev, h.m.compacted); err != nil {
		h.t.Fatalf("SetRevisions: %v", err)
	}
	if err := tx.Commit(); err != nil {
		h.t.Fatalf("Commit: %v", err)
	}
	h.m.current = rev
	return rev
}

// write runs fn in a write transaction and commits it.
func (h *harness) write(fn func(tx mvcc.WriteTx)) {
	h.t.Helper()
	tx, err := h.b.BeginWrite(context.Background())
	if err != nil {
		h.t.Fatalf("BeginWrite: %v", err)
	}
	fn(tx)
	if err := tx.Commit(); err != nil {
		h.t.Fatalf("Commit: %v", err)
	}
}

// read runs fn in a read transaction.
func (h *harness) read(fn func(tx mvcc.ReadTx)) {
	h.t.Helper()
	tx, err := h.b.BeginRead(context.Background())
	if err != nil {
		h.t.Fatalf("BeginRead: %v", err)
	}
	defer func() {
		if err := tx.Rollback(); err != nil {
			h.t.Errorf("read Rollback: %v", err)
		}
	}()
	fn(tx)
}

func pb(kv KV) *mvccpb.KeyValue {
	return &mvccpb.KeyValue{Key: []byte(kv.Key), CreateRevision: kv.Create, ModRevision: kv.Mod,
		Version: kv.Version, Lease: kv.Lease, Value: []byte(kv.Value)}
}

func plainKV(kv *mvccpb.KeyValue) KV {
	return KV{Key: string(kv.Key), Create: kv.CreateRevision, Mod: kv.ModRevision,
		Version: kv.Version, Lease: kv.Lease, Value: string(kv.Value)}
}

func plainKVs(kvs []*mvccpb.KeyValue) []KV {
	var out []KV
	for _, kv := range kvs {
		out = append(out, plainKV(kv))
	}
	return out
}

func plainChanges(cs []mvcc.Change) []Change {
	var out []Change
	for _, c := range cs {
		pc := Change{Sub: c.Sub, Deleted: c.Deleted, KV: plainKV(c.KV)}
		if c.PrevKV != nil {
			p := plainKV(c.PrevKV)
			pc.Prev = &p
		}
		out = append(out, pc)
	}
	return out
}

func keysOnly(kvs []KV) []KV {
	var out []KV
	for _, kv := range kvs {
		kv.Value = ""
		out = append(out, kv)
	}
	return out
}

func limited(kvs []KV, limit int64) []KV {
	if limit > 0 && int64(len(kvs)) > limit {
		return kvs[:limit]
	}
	return kvs
}

// equal reports a mismatch between got and want, both of which must be
// plain values (nil and empty slices are equal).
func equal(t *testing.T, what string, got, want any) bool {
	t.Helper()
	g, w := reflect.ValueOf(got), reflect.ValueOf(want)
	if g.Kind() == reflect.Slice && w.Kind() == reflect.Slice && g.Len() == 0 && w.Len() == 0 {
		return true
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s:\n got  %s\n want %s", what, show(got), show(want))
		return false
	}
	return true
}

func show(v any) string {
	if cs, ok := v.([]Change); ok {
		s := "["
		for _, c := range cs {
			s += fmt.Sprintf("{sub=%d del=%v kv=%+v", c.Sub, c.Deleted, c.KV)
			if c.Prev != nil {
				s += fmt.Sprintf(" prev=%+v", *c.Prev)
			}
			s += "} "
		}
		return s + "]"
	}
	return fmt.Sprintf("%+q", v)
}

// rangeOf calls Range and fails the test on error.
func rangeOf(t *testing.T, tx mvcc.ReadTx, key, end []byte, rev, limit int64, keysOnly bool) []KV {
	t.Helper()
	kvs, err := tx.Range(context.Background(), key, end, rev, limit, keysOnly)
	if err != nil {
		t.Fatalf("Range(%q, %q, rev %d, limit %d, keysOnly %v): %v", key, end, rev, limit, keysOnly, err)
	}
	return plainKVs(kvs)
}

func countOf(t *testing.T, tx mvcc.ReadTx, key, end []byte, rev int64) int64 {
	t.Helper()
	n, err := tx.Count(context.Background(), key, end, rev)
	if err != nil {
		t.Fatalf("Count(%q, %q, rev %d): %v", key, end, rev, err)
	}
	return n
}

func changesOf(t *testing.T, tx mvcc.ReadTx, from, to int64, limit int, withPrev bool) []Change {
	t.Helper()
	cs, err := tx.Changes(context.Background(), from, to, limit, withPrev)
	if err != nil {
		t.Fatalf("Changes(%d, %d, %d, %v): %v", from, to, limit, withPrev, err)
	}
	return plainChanges(cs)
}

func getOf(t *testing.T, tx mvcc.ReadTx, key string) *KV {
	t.Helper()
	kv, err := tx.Get(context.Background(), []byte(key))
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	// A driver that reads a row without its value (mvcc.RowMetaReader)
	// must give the same row less the value.
	if m, ok := tx.(mvcc.RowMetaReader); ok {
		meta, err := m.GetMeta(context.Background(), []byte(key))
		if err != nil {
			t.Fatalf("GetMeta(%q): %v", key, err)
		}
		var want *mvccpb.KeyValue
		if kv != nil {
			want = &mvccpb.KeyValue{Key: kv.Key, CreateRevision: kv.CreateRevision,
				ModRevision: kv.ModRevision, Version: kv.Version, Lease: kv.Lease}
		}
		if (meta == nil) != (want == nil) || meta != nil && (len(meta.Value) != 0 || plainKV(meta) != plainKV(want)) {
			t.Fatalf("GetMeta(%q) = %v; want Get's row %v without its value", key, meta, kv)
		}
	}
	if kv == nil {
		return nil
	}
	p := plainKV(kv)
	return &p
}

func revisionsOf(t *testing.T, tx mvcc.ReadTx) [2]int64 {
	t.Helper()
	cur, comp, err := tx.Revisions(context.Background())
	if err != nil {
		t.Fatalf("Revisions: %v", err)
	}
	return [2]int64{cur, comp}
}

// all is the range of every key.
var all = [2][]byte{{}, {0}}

// checkAgainstModel compares every read of tx at every revision from
// fromRev to the current one with the model.
func (h *harness) checkAgainstModel(tx mvcc.ReadTx, fromRev int64, spans [][2][]byte) {
	t := h.t
	t.Helper()
	equal(t, "Revisions", revisionsOf(t, tx), [2]int64{h.m.current, h.m.compacted})
	for rev := fromRev; rev <= h.m.current; rev++ {
		for _, s := range spans {
			want := h.m.rangeAt(s[0], s[1], rev)
			what := fmt.Sprintf("Range(%q, %q) at rev %d of %d", s[0], s[1], rev, h.m.current)
			equal(t, what, rangeOf(t, tx, s[0], s[1], rev, 0, false), want)
			equal(t, what+" keysOnly", rangeOf(t, tx, s[0], s[1], rev, 0, true), keysOnly(want))
			equal(t, what+" limit 2", rangeOf(t, tx, s[0], s[1], rev, 2, false), limited(want, 2))
			equal(t, "Count"+what[5:], countOf(t, tx, s[0], s[1], rev), int64(len(want)))
		}
	}
	equal(t, "Changes(1, current)", changesOf(t, tx, 1, h.m.current, 0, true), h.m.changes(1, h.m.current, true))
	for _, kv := range h.m.rangeAt(all[0], all[1], h.m.current) {
		equal(t, "Get("+kv.Key+")", getOf(t, tx, kv.Key), &kv)
	}
	leases, err := tx.Leases(context.Background())
	if err != nil {
		t.Fatalf("Leases: %v", err)
	}
	equal(t, "Leases", leases, h.m.leaseList())
}
