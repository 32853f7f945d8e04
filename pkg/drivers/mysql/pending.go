package mysql

import (
	"slices"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// pending holds a write transaction's writes until the next read, the
// next CompactBatch or the COMMIT, which send them in the same round trip
// as multi-row statements: a batch of puts costs no round trip of its own.
// Only what the database must end up with is kept: the log rows, each
// key's final live row, each lease's final state; alarm and auth
// statements stay in order.
type pending struct {
	log []logRow
	// live is each written key's live row, nil for a deleted key; order
	// lists the keys as first written, so statements are deterministic.
	live   map[string]*mvccpb.KeyValue
	order  []string
	leases map[int64]leaseOp
	ids    []int64
	stmts  []statement

	revisions          bool
	current, compacted int64
	// synced is recorded with the revisions: the server is a Galera node
	// (failover.go).
	synced bool

	size int // a bound on the bytes the rows take in a statement
}

type logRow struct {
	rev, createRev, version, lease int64
	sub                            int32
	deleted                        bool
	key, value                     []byte
}

type leaseOp struct {
	ttl     int64
	deleted bool
}

// statement is SQL with its arguments.
type statement struct {
	sql  string
	args []any
	size int
}

// argSize bounds the bytes an argument takes interpolated into a
// statement: a binary string may be escaped byte by byte.
func argSize(b []byte) int { return 2*len(b) + 16 }

const rowOverhead = 8 * 24

func (p *pending) empty() bool {
	return len(p.log) == 0 && len(p.order) == 0 && len(p.ids) == 0 && len(p.stmts) == 0 && !p.revisions
}

func (p *pending) rows() int { return len(p.log) + len(p.order) + len(p.ids) + len(p.stmts) }

func (p *pending) reset() {
	*p = pending{}
}

func (p *pending) appendLog(r logRow) {
	p.log = append(p.log, r)
	p.size += argSize(r.key) + argSize(r.value) + rowOverhead
}

func (p *pending) setLive(key []byte, kv *mvccpb.KeyValue) {
	if p.live == nil {
		p.live = map[string]*mvccpb.KeyValue{}
	}
	if _, ok := p.live[string(key)]; !ok {
		p.order = append(p.order, string(key))
	}
	p.live[string(key)] = kv
	p.size += argSize(key) + rowOverhead
	if kv != nil {
		p.size += argSize(kv.Value)
	}
}

// liveRow returns key's live row as written by the pending writes; ok is
// false if they did not write key.
func (p *pending) liveRow(key []byte) (kv *mvccpb.KeyValue, ok bool) {
	kv, ok = p.live[string(key)]
	return kv, ok
}

func (p *pending) setLease(id, ttl int64, deleted bool) {
	if p.leases == nil {
		p.leases = map[int64]leaseOp{}
	}
	if _, ok := p.leases[id]; !ok {
		p.ids = append(p.ids, id)
	}
	p.leases[id] = leaseOp{ttl: ttl, deleted: deleted}
	p.size += rowOverhead
}

func (p *pending) statement(sql string, args ...any) {
	s := statement{sql: sql, args: args, size: len(sql)}
	for _, a := range args {
		if b, ok := a.([]byte); ok {
			s.size += argSize(b)
		} else {
			s.size += 24
		}
	}
	p.stmts = append(p.stmts, s)
	p.size += s.size
}

func (p *pending) setRevisions(current, compacted int64, synced bool) {
	p.revisions, p.current, p.compacted, p.synced = true, current, compacted, synced
}

// batches returns the pending writes as multi-statement batches, each
// within budget bytes (a single row larger than that goes alone). Deleted
// live rows go before upserts; a key is in only one of the two.
func (p *pending) batches(packet int) []statement {
	budget := max(packet/2, 64<<10)
	var stmts []statement
	multiRow := func(head, row, tail string, n int, args func(i int) ([]any, int)) {
		var cur *statement
		for i := range n {
			a, size := args(i)
			if cur != nil && cur.size+size > budget {
				cur.sql += tail
				stmts = append(stmts, *cur)
				cur = nil
			}
			if cur == nil {
				cur = &statement{sql: head + row, size: len(head) + len(tail)}
			} else {
				cur.sql += ", " + row
			}
			cur.args = append(cur.args, a...)
			cur.size += size + len(row)
		}
		if cur != nil {
			cur.sql += tail
			stmts = append(stmts, *cur)
		}
	}
	multiRow(sqlInsertLog, rowInsertLog, "", len(p.log), func(i int) ([]any, int) {
		r := &p.log[i]
		return []any{r.rev, r.sub, r.key, r.createRev, r.version, r.lease, r.deleted, r.value},
			argSize(r.key) + argSize(r.value) + rowOverhead
	})
	var deleted, upserted []string
	for _, k := range p.order {
		if p.live[k] == nil {
			deleted = append(deleted, k)
		} else {
			upserted = append(upserted, k)
		}
	}
	if len(deleted) > 0 {
		// DELETE ... IN (?, ?): the list is built like a multi-row insert.
		multiRow(sqlDeleteLive+"(", "?", ")", len(deleted), func(i int) ([]any, int) {
			return []any{[]byte(deleted[i])}, argSize([]byte(deleted[i]))
		})
	}
	multiRow(sqlUpsertLive, rowUpsertLive, sqlUpsertLiveEnd, len(upserted), func(i int) ([]any, int) {
		kv := p.live[upserted[i]]
		return []any{kv.Key, kv.ModRevision, kv.CreateRevision, kv.Version, kv.Lease, kv.Value},
			argSize(kv.Key) + argSize(kv.Value) + rowOverhead
	})
	for _, id := range p.ids {
		l := p.leases[id]
		if l.deleted {
			stmts = append(stmts, statement{sql: sqlDeleteLease, args: []any{id}, size: len(sqlDeleteLease) + 24})
		} else {
			stmts = append(stmts, statement{sql: sqlPutLease, args: []any{id, l.ttl}, size: len(sqlPutLease) + 48})
		}
	}
	stmts = append(stmts, p.stmts...)
	if p.revisions {
		stmts = append(stmts, statement{sql: sqlSetRevisions, args: []any{p.current, p.compacted, p.synced},
			size: len(sqlSetRevisions) + 48})
	}
	return joinStatements(stmts, budget)
}

// joinStatements groups consecutive statements into multi-statement
// batches of at most budget bytes, one round trip each.
func joinStatements(stmts []statement, budget int) []statement {
	var out []statement
	for _, s := range stmts {
		if n := len(out); n > 0 && out[n-1].size+s.size <= budget {
			last := &out[n-1]
			last.sql += "; " + s.sql
			last.args = append(last.args, s.args...)
			last.size += s.size + 2
			continue
		}
		s.args = slices.Clip(s.args)
		out = append(out, s)
	}
	return out
}
