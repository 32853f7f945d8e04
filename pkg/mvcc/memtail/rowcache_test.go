package memtail_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/kite-db/kite/pkg/drivers/sqlite"
	"github.com/kite-db/kite/pkg/mvcc"
	"github.com/kite-db/kite/pkg/mvcc/memtail"
)

// TestWriterReadsNeverStale drives a Backend with the writes that could
// leave the writer's row cache stale (puts, deletes, flushes, reopens,
// compactions, rolled-back transactions, writes the base refuses, rows
// evicted or too large to be kept) and checks after each step that a
// write transaction's Get, single-key Range and delete liveness agree
// with a model, at every flush policy and with no cache, a cache of about
// two rows, and one that holds everything.
func TestWriterReadsNeverStale(t *testing.T) {
	budgets := []struct {
		name  string
		bytes int64
	}{{"NoCache", -1}, {"TwoRows", 700}, {"AllRows", 1 << 20}}
	for _, bg := range budgets {
		for _, p := range policies {
			t.Run(bg.name+"/"+p.name, func(t *testing.T) {
				opts := p.opts
				opts.RowCacheBytes = bg.bytes
				m := &staleModel{t: t, opts: opts, path: filepath.Join(t.TempDir(), "kite.db"),
					rows: map[string]*mvccpb.KeyValue{}}
				m.open()
				defer func() { m.close() }()
				rng := rand.New(rand.NewPCG(uint64(len(bg.name)), uint64(len(p.name))))
				for step := range 400 {
					what := m.step(rng)
					m.check(fmt.Sprintf("step %d (%s)", step, what))
				}
			})
		}
	}
}

// staleModel is the state the Backend must show: the live row of each
// key, the revisions.
type staleModel struct {
	t                  *testing.T
	opts               memtail.Options
	path               string
	b                  *memtail.Backend
	rows               map[string]*mvccpb.KeyValue
	current, compacted int64
}

const staleMaxChanges = 4

func (m *staleModel) open() {
	m.t.Helper()
	ctx := context.Background()
	base, err := sqlite.Open(ctx, m.path, sqlite.Options{NoCommitSync: true, MaxChangesPerRevision: staleMaxChanges})
	if err != nil {
		m.t.Fatal(err)
	}
	opts := m.opts
	opts.LogDir = m.path + ".log"
	if m.b, err = memtail.Open(ctx, base, opts); err != nil {
		m.t.Fatal(err)
	}
}

func (m *staleModel) close() {
	m.t.Helper()
	if err := m.b.Close(); err != nil {
		m.t.Fatalf("Close: %v", err)
	}
}

var staleKeys = []string{"a", "b", "c", "d"}

func (m *staleModel) begin() mvcc.WriteTx {
	m.t.Helper()
	tx, err := m.b.BeginWrite(context.Background())
	if err != nil {
		m.t.Fatal(err)
	}
	return tx
}

// next returns the row a put of key at rev writes, by etcd's rules.
func (m *staleModel) next(rng *rand.Rand, key string, rev int64) *mvccpb.KeyValue {
	// Sometimes larger than the whole budget of "TwoRows".
	val := bytes.Repeat([]byte{byte('a' + rev%26)}, rng.IntN(900))
	kv := &mvccpb.KeyValue{Key: []byte(key), Value: val, CreateRevision: rev, ModRevision: rev, Version: 1}
	if old := m.rows[key]; old != nil {
		kv.CreateRevision, kv.Version = old.CreateRevision, old.Version+1
	}
	return kv
}

func (m *staleModel) must(err error, what string) {
	m.t.Helper()
	if err != nil {
		m.t.Fatalf("%s: %v", what, err)
	}
}

// step makes one random change, or none, and says which.
func (m *staleModel) step(rng *rand.Rand) string {
	ctx := context.Background()
	key := staleKeys[rng.IntN(len(staleKeys))]
	rev := m.current + 1
	switch n := rng.IntN(100); {
	case n < 35: // a put, its previous row read first (whole or without its value) or not
		tx := m.begin()
		switch rng.IntN(3) {
		case 0:
			_, err := tx.Get(ctx, []byte(key))
			m.must(err, "Get")
		case 1:
			_, err := tx.(mvcc.RowMetaReader).GetMeta(ctx, []byte(key))
			m.must(err, "GetMeta")
		}
		kv := m.next(rng, key, rev)
		m.must(tx.Put(ctx, kv, 0), "Put")
		m.must(tx.SetRevisions(ctx, rev, m.compacted), "SetRevisions")
		m.must(tx.Commit(), "Commit")
		m.rows[key], m.current = kv, rev
		return "put " + key
	case n < 55: // a delete of a live key, ranged first or not
		if m.rows[key] == nil {
			return "nothing"
		}
		tx := m.begin()
		if rng.IntN(2) == 0 {
			_, err := tx.Range(ctx, []byte(key), nil, m.current, 0, rng.IntN(2) == 0)
			m.must(err, "Range")
		}
		m.must(tx.Delete(ctx, []byte(key), rev, 0), "Delete")
		m.must(tx.SetRevisions(ctx, rev, m.compacted), "SetRevisions")
		m.must(tx.Commit(), "Commit")
		delete(m.rows, key)
		m.current = rev
		return "delete " + key
	case n < 65: // rolled back after reading and writing
		tx := m.begin()
		_, err := tx.Get(ctx, []byte(key))
		m.must(err, "Get")
		m.must(tx.Put(ctx, m.next(rng, key, rev), 0), "Put")
		other := staleKeys[rng.IntN(len(staleKeys))]
		_, err = tx.Get(ctx, []byte(other))
		m.must(err, "Get")
		m.must(tx.Delete(ctx, []byte(other), rev, 1), "Delete")
		m.must(tx.Rollback(), "Rollback")
		return "rolled back " + key + ", " + other
	case n < 75: // a change the base refuses, after good ones
		tx := m.begin()
		_, err := tx.Get(ctx, []byte(key))
		m.must(err, "Get")
		m.must(tx.Put(ctx, m.next(rng, key, rev), 0), "Put")
		other := staleKeys[rng.IntN(len(staleKeys))]
		if err := tx.Put(ctx, m.next(rng, other, rev), staleMaxChanges+1); err == nil {
			m.t.Fatal("a change past MaxChangesPerRevision was accepted")
		}
		if err := tx.Commit(); err == nil {
			m.t.Fatal("Commit after a refused change succeeded")
		}
		return "refused " + key + ", " + other
	case n < 82: // a compaction, with a put in the same transaction
		tx := m.begin()
		_, err := tx.CompactBatch(ctx, m.current, 1, m.current)
		m.must(err, "CompactBatch")
		kv := m.next(rng, key, rev)
		_, err = tx.Get(ctx, []byte(key))
		m.must(err, "Get")
		m.must(tx.Put(ctx, kv, 0), "Put")
		m.must(tx.SetRevisions(ctx, rev, m.current), "SetRevisions")
		m.must(tx.Commit(), "Commit")
		m.rows[key], m.compacted, m.current = kv, m.current, rev
		return "compact and put " + key
	case n < 88: // a flush, through Defragment
		m.must(m.b.Defragment(ctx), "Defragment")
		return "flush"
	case n < 92:
		m.close()
		m.open()
		return "reopen"
	}
	return "nothing"
}

// check reads every key in a write transaction, twice (the second read
// may be answered from what the first filled in), and compares with the
// model; then the count a read merges with each change's liveness.
func (m *staleModel) check(when string) {
	m.t.Helper()
	ctx := context.Background()
	for round := range 2 {
		tx := m.begin()
		cur, comp, err := tx.Revisions(ctx)
		m.must(err, when+": Revisions")
		if cur != m.current || comp != m.compacted {
			m.t.Fatalf("%s: Revisions = %d, %d; want %d, %d", when, cur, comp, m.current, m.compacted)
		}
		for _, k := range staleKeys {
			want := m.rows[k]
			// A row read without its value first must not leave the
			// whole read below (nor the next round's) without it.
			meta, err := tx.(mvcc.RowMetaReader).GetMeta(ctx, []byte(k))
			m.must(err, when+": GetMeta")
			if (meta == nil) != (want == nil) || meta != nil && (meta.Value != nil || !sameRow(meta, memtail.WithoutValue(want))) {
				m.t.Fatalf("%s, round %d: GetMeta(%s) = %v; want %v without its value", when, round, k, meta, want)
			}
			got, err := tx.Get(ctx, []byte(k))
			m.must(err, when+": Get")
			if !sameRow(got, want) {
				m.t.Fatalf("%s, round %d: Get(%s) = %v; want %v", when, round, k, got, want)
			}
			if got != nil {
				got.Value = nil // the caller's to change
			}
			for _, keysOnly := range []bool{false, true} {
				kvs, err := tx.Range(ctx, []byte(k), nil, m.current, 0, keysOnly)
				m.must(err, when+": Range")
				var w []*mvccpb.KeyValue
				if want != nil {
					wk := &mvccpb.KeyValue{Key: want.Key, Value: want.Value, CreateRevision: want.CreateRevision,
						ModRevision: want.ModRevision, Version: want.Version, Lease: want.Lease}
					if keysOnly {
						wk.Value = nil
					}
					w = []*mvccpb.KeyValue{wk}
				}
				if len(kvs) != len(w) || (len(w) == 1 && !sameRow(kvs[0], w[0])) {
					m.t.Fatalf("%s, round %d: Range(%s, keysOnly %v) = %v; want %v", when, round, k, keysOnly, kvs, w)
				}
			}
		}
		if round == 0 {
			m.must(tx.Commit(), when+": Commit of reads")
		} else {
			m.must(tx.Rollback(), when+": Rollback of reads")
		}
	}
	m.checkInBatch(when)
	r, err := m.b.BeginRead(ctx)
	m.must(err, when+": BeginRead")
	defer r.Rollback()
	n, err := r.Count(ctx, []byte{0}, []byte{0}, m.current)
	m.must(err, when+": Count")
	if n != int64(len(m.rows)) {
		m.t.Fatalf("%s: Count = %d; want %d", when, n, len(m.rows))
	}
}

// checkInBatch reads, in a transaction that wrote a key at the next
// revision and has not set the revisions yet (as the Store's group commit
// does), every key at that revision, which sees the write, and at the
// current one, which must not.
func (m *staleModel) checkInBatch(when string) {
	m.t.Helper()
	ctx := context.Background()
	tx := m.begin()
	defer tx.Rollback()
	rev := m.current + 1
	written := m.next(rand.New(rand.NewPCG(uint64(rev), 1)), staleKeys[0], rev)
	m.must(tx.Put(ctx, written, 0), when+": Put")
	for _, k := range staleKeys {
		for _, at := range []int64{rev, m.current} {
			want := m.rows[k]
			if k == staleKeys[0] && at == rev {
				want = written
			}
			kvs, err := tx.Range(ctx, []byte(k), nil, at, 0, false)
			m.must(err, when+": Range")
			if len(kvs) > 1 || (len(kvs) == 1) != (want != nil) || (want != nil && !sameRow(kvs[0], want)) {
				m.t.Fatalf("%s: in a batch that wrote %s at %d: Range(%s) at %d = %v; want %v", when, staleKeys[0], rev, k, at, kvs, want)
			}
		}
	}
}

func sameRow(a, b *mvccpb.KeyValue) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return bytes.Equal(a.Key, b.Key) && bytes.Equal(a.Value, b.Value) && a.CreateRevision == b.CreateRevision &&
		a.ModRevision == b.ModRevision && a.Version == b.Version && a.Lease == b.Lease
}
