package mysql

import (
	"bytes"
	"context"
	"slices"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/kite-db/kite/pkg/mvcc"
)

// Reads of the past go through the log, and are written so that what
// they cost follows what they return. MySQL and MariaDB have no LATERAL
// join (MariaDB) and never bound a correlated subquery's index walk by a
// value of the outer row: "the newest row of this key below this
// revision" as a subquery walks the key's whole history, once per row.
// So a historical range reads pages of keys with one index walk each
// (histSQL), and the previous rows of changes are looked up with
// constants (sqlPrevBranch).

// histPage bounds the keys one statement of a historical read resolves:
// small enough that the planner keeps to the index order (a large LIMIT
// makes it group through a temporary table and sort), large enough that
// a long read takes few round trips.
const histPage = 500

// histRow is a row of a historical page.
type histRow struct {
	kv      *mvccpb.KeyValue
	sub     int64
	deleted bool
}

// rangeAt reads the keys of [from, to) (no upper bound if open) as of
// revision rev, page by page, until limit keys (0: all) are found. With
// count it counts them instead, returning no rows.
func (r *reader) rangeAt(ctx context.Context, from, to []byte, open bool, rev, limit int64, keysOnly, count bool) ([]*mvccpb.KeyValue, int64, error) {
	var out []*mvccpb.KeyValue
	var n int64
	query := r.q.hist[histIndex(open, keysOnly || count)]
	for {
		// A page asks for more keys than the limit still wants, so that
		// a few deleted keys do not cost a round trip each.
		page := int64(histPage)
		if limit > 0 {
			page = min(page, max(2*(limit-n), 16))
		}
		args := []any{from}
		if !open {
			args = append(args, to)
		}
		args = append(args, rev, page)
		rows, err := r.query(ctx, query, args...)
		if err != nil {
			return nil, 0, r.fail("range", err)
		}
		var got []histRow
		for rows.Next() {
			h := histRow{kv: &mvccpb.KeyValue{}}
			dest := []any{&h.kv.Key, &h.kv.CreateRevision, &h.kv.ModRevision, &h.kv.Version, &h.kv.Lease,
				&h.sub, &h.deleted}
			if !keysOnly && !count {
				dest = append(dest, &h.kv.Value)
			}
			if err := rows.Scan(dest...); err != nil {
				rows.Close()
				return nil, 0, r.fail("range: scan", err)
			}
			got = append(got, h)
		}
		if err := rows.Err(); err != nil {
			return nil, 0, r.fail("range", err)
		}
		// The join gives no order: sort by key, and within a key by
		// sub-revision, the last of which is the key's newest row.
		slices.SortFunc(got, func(a, b histRow) int {
			if c := bytes.Compare(a.kv.Key, b.kv.Key); c != 0 {
				return c
			}
			return int(a.sub - b.sub)
		})
		var keys int64
		for i, h := range got {
			if i+1 < len(got) && bytes.Equal(got[i+1].kv.Key, h.kv.Key) {
				continue // an older row of the same revision
			}
			keys++
			if h.deleted || limit > 0 && n >= limit {
				continue
			}
			n++
			if !count {
				out = append(out, h.kv)
			}
		}
		if keys < page || limit > 0 && n >= limit {
			return out, n, nil
		}
		// The next page starts after the last key of this one.
		from = append(slices.Clip(got[len(got)-1].kv.Key), 0)
	}
}

// prevBranches bounds the branches of one previous-row lookup.
const prevBranches = 200

// fillPrev sets the PrevKV of each change in cs. A change whose key has
// an earlier change in cs gets that one (none if it is a tombstone); cs
// starts at the first sub-revision of its first revision, so for the
// others the previous row is the newest row of the key at a lower
// revision, looked up in batches.
func (r *reader) fillPrev(ctx context.Context, cs []mvcc.Change) error {
	last := map[string]int{}
	var need []int
	for i := range cs {
		key := string(cs[i].KV.Key)
		if j, ok := last[key]; ok {
			if prev := cs[j].KV; !cs[j].Deleted {
				cs[i].PrevKV = &mvccpb.KeyValue{Key: prev.Key, CreateRevision: prev.CreateRevision,
					ModRevision: prev.ModRevision, Version: prev.Version, Lease: prev.Lease, Value: prev.Value}
			}
		} else {
			need = append(need, i)
		}
		last[key] = i
	}
	for len(need) > 0 {
		batch := need[:min(len(need), prevBranches)]
		need = need[len(batch):]
		args := make([]any, 0, 4*len(batch))
		for _, i := range batch {
			kv := cs[i].KV
			args = append(args, int64(i), kv.Key, kv.Key, kv.ModRevision)
		}
		query := strings.Repeat(sqlPrevBranch+" UNION ALL ", len(batch)-1) + sqlPrevBranch
		rows, err := r.query(ctx, query, args...)
		if err != nil {
			return r.fail("read previous rows", err)
		}
		subs := map[int64]int64{}
		for rows.Next() {
			var (
				i, sub  int64
				deleted bool
				p       = &mvccpb.KeyValue{}
			)
			if err := rows.Scan(&i, &sub, &p.ModRevision, &p.CreateRevision, &p.Version, &p.Lease,
				&deleted, &p.Value); err != nil {
				rows.Close()
				return r.fail("read previous rows: scan", err)
			}
			if s, ok := subs[i]; ok && s > sub {
				continue // a later row of the same revision came first
			}
			subs[i] = sub
			cs[i].PrevKV = nil
			if !deleted {
				p.Key = cs[i].KV.Key
				cs[i].PrevKV = p
			}
		}
		if err := rows.Err(); err != nil {
			return r.fail("read previous rows", err)
		}
	}
	return nil
}
