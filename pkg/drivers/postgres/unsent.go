package postgres

import (
	"github.com/jackc/pgx/v5"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// unsentWrites is what a write transaction has written and not yet sent.
// Log rows are kept as columns and sent as arrays, one INSERT for all of
// them; the live index keeps only each key's final state, since a batch
// may put, delete and put a key again and only the last counts (ON
// CONFLICT DO UPDATE may not touch a row twice in one statement
// anyway). Lease, alarm and auth state writes are rare and
// order-sensitive: they stay single statements, in call order.
type unsentWrites struct {
	logRev, logCreate, logVersion, logLease []int64
	logSub                                  []int32
	logDeleted                              []bool
	logKey, logValue                        [][]byte

	liveIdx  map[string]int     // key -> index in liveKVs
	liveKeys [][]byte           // by index
	liveKVs  []*mvccpb.KeyValue // nil: the key was deleted

	revisions          bool
	current, compacted int64

	stmts  []statement
	leases map[int64]leaseChange // the last change of each lease, for Lease
}

type statement struct {
	sql  string
	args []any
}

type leaseChange struct {
	ttl     int64
	deleted bool
}

func (p *unsentWrites) appendLog(rev int64, sub int32, key []byte, create, version, lease int64, deleted bool, value []byte) {
	p.logRev = append(p.logRev, rev)
	p.logSub = append(p.logSub, sub)
	p.logKey = append(p.logKey, key)
	p.logCreate = append(p.logCreate, create)
	p.logVersion = append(p.logVersion, version)
	p.logLease = append(p.logLease, lease)
	p.logDeleted = append(p.logDeleted, deleted)
	p.logValue = append(p.logValue, value)
}

// setLive records key's new live row (nil: no live row).
func (p *unsentWrites) setLive(key []byte, kv *mvccpb.KeyValue) {
	if p.liveIdx == nil {
		p.liveIdx = make(map[string]int)
	}
	if i, ok := p.liveIdx[string(key)]; ok {
		p.liveKVs[i] = kv
		return
	}
	p.liveIdx[string(key)] = len(p.liveKeys)
	p.liveKeys = append(p.liveKeys, key)
	p.liveKVs = append(p.liveKVs, kv)
}

// live returns key's pending live row; ok is false if key has none pending.
func (p *unsentWrites) live(key []byte) (kv *mvccpb.KeyValue, ok bool) {
	i, ok := p.liveIdx[string(key)]
	if !ok {
		return nil, false
	}
	return p.liveKVs[i], true
}

func (p *unsentWrites) setRevisions(current, compacted int64) {
	p.revisions, p.current, p.compacted = true, current, compacted
}

func (p *unsentWrites) statement(sql string, args ...any) {
	p.stmts = append(p.stmts, statement{sql: sql, args: args})
}

func (p *unsentWrites) setLease(id, ttl int64, deleted bool, sql string, args ...any) {
	if p.leases == nil {
		p.leases = make(map[int64]leaseChange)
	}
	p.leases[id] = leaseChange{ttl: ttl, deleted: deleted}
	p.statement(sql, args...)
}

func (p *unsentWrites) empty() bool {
	return len(p.logRev) == 0 && len(p.liveKeys) == 0 && !p.revisions && len(p.stmts) == 0
}

// rows is how many log rows and statements are pending.
func (p *unsentWrites) rows() int { return len(p.logRev) + len(p.stmts) }

// queue adds the pending writes to b and returns how many statements it
// queued. The tables are independent, so only the order within a table
// matters.
func (p *unsentWrites) queue(b *pgx.Batch) int {
	n := b.Len()
	if len(p.logRev) > 0 {
		b.Queue(sqlInsertLog, p.logRev, p.logSub, p.logKey, p.logCreate, p.logVersion,
			p.logLease, p.logDeleted, p.logValue)
	}
	var (
		putKeys, putValues                      [][]byte
		putMod, putCreate, putVersion, putLease []int64
		delKeys                                 [][]byte
	)
	for i, kv := range p.liveKVs {
		if kv == nil {
			delKeys = append(delKeys, p.liveKeys[i])
			continue
		}
		putKeys = append(putKeys, kv.Key)
		putMod = append(putMod, kv.ModRevision)
		putCreate = append(putCreate, kv.CreateRevision)
		putVersion = append(putVersion, kv.Version)
		putLease = append(putLease, kv.Lease)
		putValues = append(putValues, kv.Value)
	}
	if len(delKeys) > 0 {
		b.Queue(sqlDeleteLive, delKeys)
	}
	if len(putKeys) > 0 {
		b.Queue(sqlUpsertLive, putKeys, putMod, putCreate, putVersion, putLease, putValues)
	}
	if p.revisions {
		b.Queue(sqlSetRevisions, p.current, p.compacted)
	}
	for _, s := range p.stmts {
		b.Queue(s.sql, s.args...)
	}
	return b.Len() - n
}

// reset forgets what was queued. The slices are dropped, not reused: a
// sent batch may still refer to them.
func (p *unsentWrites) reset() {
	*p = unsentWrites{}
}
