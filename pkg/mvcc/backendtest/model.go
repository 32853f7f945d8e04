package backendtest

import (
	"bytes"
	"sort"

	"github.com/kite-db/kite/pkg/mvcc"
)

// KV is a comparable, printable view of an mvccpb.KeyValue.
type KV struct {
	Key     string
	Create  int64
	Mod     int64
	Version int64
	Lease   int64
	Value   string
}

// Change is a comparable, printable view of an mvcc.Change.
type Change struct {
	Sub     int64
	Deleted bool
	KV      KV
	Prev    *KV
}

// row is one log row of the reference model.
type row struct {
	Sub     int64
	Deleted bool
	KV      KV
}

// model is the reference the suite checks drivers against: the log as a
// plain slice in (rev, sub) order, queried by brute force.
type model struct {
	rows      []row
	current   int64
	compacted int64
	leases    map[int64]int64
}

func newModel() *model { return &model{leases: map[int64]int64{}} }

// newest returns the newest row of key with revision <= rev, or nil.
func (m *model) newest(key string, rev int64) *row {
	var found *row
	for i := range m.rows {
		r := &m.rows[i]
		if r.KV.Key == key && r.KV.Mod <= rev {
			found = r
		}
	}
	return found
}

// last returns the newest row of key in the whole log (including rows of a
// revision still being written), or nil if that row is a tombstone.
func (m *model) last(key string) *KV {
	for i := len(m.rows) - 1; i >= 0; i-- {
		if r := m.rows[i]; r.KV.Key == key {
			if r.Deleted {
				return nil
			}
			kv := r.KV
			return &kv
		}
	}
	return nil
}

// live returns the live row of key, or nil.
func (m *model) live(key string) *KV {
	r := m.newest(key, m.current)
	if r == nil || r.Deleted {
		return nil
	}
	kv := r.KV
	return &kv
}

// inRange applies etcd's range end conventions.
func inRange(k string, key, end []byte) bool {
	switch {
	case len(end) == 0:
		return k == string(key)
	case len(end) == 1 && end[0] == 0:
		return bytes.Compare([]byte(k), key) >= 0
	default:
		return bytes.Compare([]byte(k), key) >= 0 && bytes.Compare([]byte(k), end) < 0
	}
}

// rangeAt returns what Range(key, end, rev) must return without a limit.
func (m *model) rangeAt(key, end []byte, rev int64) []KV {
	seen := map[string]bool{}
	var out []KV
	for _, r := range m.rows {
		k := r.KV.Key
		if seen[k] || !inRange(k, key, end) {
			continue
		}
		seen[k] = true
		if n := m.newest(k, rev); n != nil && !n.Deleted {
			out = append(out, n.KV)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// changes returns what Changes(from, to, 0, withPrev) must return.
func (m *model) changes(from, to int64, withPrev bool) []Change {
	var out []Change
	for i, r := range m.rows {
		if r.KV.Mod < from || r.KV.Mod > to {
			continue
		}
		c := Change{Sub: r.Sub, Deleted: r.Deleted, KV: r.KV}
		if withPrev {
			for j := i - 1; j >= 0; j-- {
				if p := m.rows[j]; p.KV.Key == r.KV.Key {
					if !p.Deleted {
						kv := p.KV
						c.Prev = &kv
					}
					break
				}
			}
		}
		out = append(out, c)
	}
	return out
}

// compact removes what CompactBatch(compacted, 1, compacted) must remove and
// returns how many rows that is.
func (m *model) compact(compacted int64) int64 {
	superseded := func(i int) bool {
		r := m.rows[i]
		if r.KV.Mod > compacted {
			return false
		}
		if r.Deleted {
			return true
		}
		for _, n := range m.rows[i+1:] {
			// rows are in (rev, sub) order: every later row of the key is newer.
			if n.KV.Key == r.KV.Key && n.KV.Mod <= compacted {
				return true
			}
		}
		return false
	}
	var kept []row
	var removed int64
	for i := range m.rows {
		if superseded(i) {
			removed++
			continue
		}
		kept = append(kept, m.rows[i])
	}
	m.rows = kept
	m.compacted = max(m.compacted, compacted)
	return removed
}

// leaseList returns the leases in ID order.
func (m *model) leaseList() []mvcc.Lease {
	var out []mvcc.Lease
	for id, ttl := range m.leases {
		out = append(out, mvcc.Lease{ID: id, TTL: ttl})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// leaseKeys returns the live keys attached to lease id, in order.
func (m *model) leaseKeys(id int64) []string {
	var out []string
	for _, kv := range m.rangeAt([]byte{}, []byte{0}, m.current) {
		if kv.Lease == id {
			out = append(out, kv.Key)
		}
	}
	return out
}

// clone returns an independent copy, for a second backend that starts from
// the same data.
func (m *model) clone() *model {
	c := &model{rows: append([]row(nil), m.rows...), current: m.current,
		compacted: m.compacted, leases: map[int64]int64{}}
	for id, ttl := range m.leases {
		c.leases[id] = ttl
	}
	return c
}
