package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync"

	"github.com/google/btree"
)

// keyIndex is the log's index by key, held in memory: for every key with
// rows in kv, the ids of those rows in ascending order, a tombstone's id
// negated. Every read by key (latest or historical, a range, a count, a
// get), the previous row of each change and the compaction's "is this row
// superseded?" are answered from it, and the row itself is then one rowid
// seek in kv.
//
// Why in memory: an index of kv on key (the schema had one, kv_key) is
// a descent and an insert into a leaf that random keys scatter for every
// row appended, and it was a third of what a flushed row cost SQLite
// (docs/benchmarks.md, "What each index costs a flushed row"); the log
// itself is appended at the right edge of its B-tree. etcd keeps the same
// index in memory (its treeIndex) over a bbolt keyed by revision, and
// rebuilds it at start from the log, as Open does here (loadKeyIndex).
// Its cost, measured at 1,000,000 keys of 38 bytes, is about 130 bytes of
// heap per key with one row, plus 8 per further row.
//
// Which rows a read sees is decided by its snapshot, not by the index:
// every lookup takes the largest id the read may see (lastID of its
// revision, at most its snapshot's current), so the writer's rows, added
// as it appends them, are invisible to every snapshot that does not hold
// them. Rows the writer rolls back are taken out again before it lets
// the next writer in (writeTx.end). Rows the compaction removes from
// kv leave the index only once no read that began before their removal
// committed is still open (queuePrune): such a read's snapshot still has
// them and may still be asked for them.
type keyIndex struct {
	mu   sync.RWMutex
	tree *btree.BTreeG[*keyRows]

	// genMu guards the bookkeeping of open reads: gen counts the
	// compactions committed, open the reads begun in each generation, and
	// pending the rows removed by each compaction, to be dropped from the
	// tree once no read of an earlier generation is open.
	genMu   sync.Mutex
	gen     uint64
	open    map[uint64]int
	pending []prune
}

// keyRows is one key's rows.
type keyRows struct {
	key string
	ids []int64 // ascending by absolute value; a tombstone's id is negated
}

// keyID names one row of the log by its key and id (negated for a
// tombstone, as in keyRows).
type keyID struct {
	key string
	id  int64
}

type prune struct {
	gen  uint64
	rows []keyID
}

func newKeyIndex() *keyIndex {
	return &keyIndex{
		tree: btree.NewG(32, func(a, b *keyRows) bool { return a.key < b.key }),
		open: map[uint64]int{},
	}
}

// loadKeyIndex reads every row's key from kv in id order. It runs in Open
// before the first read or write, on the writer's connection.
func loadKeyIndex(ctx context.Context, conn *sql.Conn) (*keyIndex, error) {
	x := newKeyIndex()
	rows, err := conn.QueryContext(ctx, `SELECT id, key, deleted FROM kv ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("build the key index: %w", err)
	}
	defer rows.Close()
	var (
		id      int64
		key     []byte
		deleted bool
		last    *keyRows
	)
	for rows.Next() {
		if err := rows.Scan(&id, blob{&key}, &deleted); err != nil {
			return nil, fmt.Errorf("build the key index: %w", err)
		}
		if deleted {
			id = -id
		}
		// Consecutive rows of one key (a txn's several changes, a load)
		// skip the tree's descent.
		if last == nil || last.key != string(key) {
			last = x.rowsOf(string(key), true)
		}
		last.ids = append(last.ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("build the key index: %w", err)
	}
	return x, nil
}

func abs(id int64) int64 {
	if id < 0 {
		return -id
	}
	return id
}

// rowsOf finds key's rows, adding an empty entry if create is set. The
// caller holds mu for writing (or owns x, as loadKeyIndex does).
func (x *keyIndex) rowsOf(key string, create bool) *keyRows {
	probe := &keyRows{key: key}
	if r, ok := x.tree.Get(probe); ok || !create {
		return r
	}
	x.tree.ReplaceOrInsert(probe)
	return probe
}

// add records a row the writer appended (id negated for a tombstone).
func (x *keyIndex) add(key string, id int64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	r := x.rowsOf(key, true)
	if n := len(r.ids); n == 0 || abs(r.ids[n-1]) < abs(id) {
		r.ids = append(r.ids, id) // the writer appends in id order
		return
	}
	i, found := find(r.ids, abs(id))
	if found {
		r.ids[i] = id
		return
	}
	r.ids = slices.Insert(r.ids, i, id)
}

// remove takes rows out: the writer's rows of a transaction rolled back,
// or rows the compaction removed from kv.
func (x *keyIndex) remove(rows []keyID) {
	if len(rows) == 0 {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	var r *keyRows
	for _, k := range rows {
		if r == nil || r.key != k.key {
			if r = x.rowsOf(k.key, false); r == nil {
				continue
			}
		}
		i, found := find(r.ids, abs(k.id))
		if !found || r.ids[i] != k.id {
			continue
		}
		r.ids = slices.Delete(r.ids, i, i+1)
		switch {
		case len(r.ids) == 0:
			x.tree.Delete(r)
			r = nil
		case cap(r.ids) > 8 && len(r.ids) < cap(r.ids)/4:
			// A compaction removes a key's oldest rows; without the copy
			// the array they sat in would stay allocated.
			r.ids = slices.Clip(slices.Clone(r.ids))
		}
	}
}

// find is where id (positive) is, or would be, in ids.
func find(ids []int64, id int64) (int, bool) {
	return slices.BinarySearchFunc(ids, id, func(e, t int64) int { return cmp.Compare(abs(e), t) })
}

// replace takes the rows of y, an index rebuilt from the log.
func (x *keyIndex) replace(y *keyIndex) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.tree = y.tree
}

// visible is the newest of ids at or below maxID (0 if none).
func visible(ids []int64, maxID int64) int64 {
	i, found := find(ids, maxID)
	if found {
		return ids[i]
	}
	if i == 0 {
		return 0
	}
	return ids[i-1]
}

// scan calls f, in key order, with the key and the id of the newest row
// at or below maxID of every key in [from, to) (no upper bound when open)
// that is live there, until f returns false.
func (x *keyIndex) scan(from, to []byte, open bool, maxID int64, f func(key string, id int64) bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	each := func(r *keyRows) bool {
		if id := visible(r.ids, maxID); id > 0 {
			return f(r.key, id)
		}
		return true
	}
	if open {
		x.tree.AscendGreaterOrEqual(&keyRows{key: string(from)}, each)
		return
	}
	x.tree.AscendRange(&keyRows{key: string(from)}, &keyRows{key: string(to)}, each)
}

// newest is the id of key's newest row at or below maxID: negative for a
// tombstone, 0 if the key has none.
func (x *keyIndex) newest(key []byte, maxID int64) int64 {
	x.mu.RLock()
	defer x.mu.RUnlock()
	r, ok := x.tree.Get(&keyRows{key: string(key)})
	if !ok {
		return 0
	}
	return visible(r.ids, maxID)
}

// prev is the id of the row of key just before id, if that row is live
// (0 otherwise: none, or a tombstone, which for etcd is no previous row).
func (x *keyIndex) prev(key []byte, id int64) int64 {
	x.mu.RLock()
	defer x.mu.RUnlock()
	r, ok := x.tree.Get(&keyRows{key: string(key)})
	if !ok {
		return 0
	}
	if p := visible(r.ids, id-1); p > 0 {
		return p
	}
	return 0
}

// superseded says whether key has a row newer than id at or below maxID.
func (x *keyIndex) superseded(key []byte, id, maxID int64) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	r, ok := x.tree.Get(&keyRows{key: string(key)})
	if !ok {
		return false
	}
	return abs(visible(r.ids, maxID)) > id
}

// beginRead registers a read about to take its snapshot; endRead, with
// the generation it returned, ends it.
func (x *keyIndex) beginRead() uint64 {
	x.genMu.Lock()
	defer x.genMu.Unlock()
	x.open[x.gen]++
	return x.gen
}

func (x *keyIndex) endRead(gen uint64) {
	x.genMu.Lock()
	if x.open[gen]--; x.open[gen] <= 0 {
		delete(x.open, gen)
	}
	waiting := len(x.pending) > 0
	x.genMu.Unlock()
	if waiting {
		x.applyPrunes()
	}
}

// queuePrune records rows a committed compaction removed from kv. They
// are dropped from the index once every read begun before the commit has
// ended.
func (x *keyIndex) queuePrune(rows []keyID) {
	if len(rows) == 0 {
		return
	}
	x.genMu.Lock()
	x.gen++
	x.pending = append(x.pending, prune{gen: x.gen, rows: rows})
	x.genMu.Unlock()
	x.applyPrunes()
}

// applyPrunes drops the queued rows no open read may still ask for.
func (x *keyIndex) applyPrunes() {
	x.genMu.Lock()
	if len(x.pending) == 0 {
		x.genMu.Unlock()
		return
	}
	oldest := x.gen
	for g := range x.open {
		oldest = min(oldest, g)
	}
	var ready []prune
	for len(x.pending) > 0 && x.pending[0].gen <= oldest {
		ready = append(ready, x.pending[0])
		x.pending = x.pending[1:]
	}
	x.genMu.Unlock()
	for _, p := range ready {
		x.remove(p.rows)
	}
}
