package mysql

import (
	"context"
	"database/sql"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/kite-db/kite/pkg/mvcc"
)

// span turns etcd's range end into SQL bounds: a single key becomes
// [key, key+"\x00"), the only key between the two in bytewise order; "\x00"
// has no upper bound. A nil key must still bind as an empty string: the
// driver sends nil as NULL, which compares as unknown and matches nothing.
func span(key, end []byte) (from, to []byte, open bool) {
	from = nonNil(key)
	switch {
	case len(end) == 0:
		return from, append(append(make([]byte, 0, len(key)+1), key...), 0), false
	case len(end) == 1 && end[0] == 0:
		return from, nil, true
	default:
		return from, end, false
	}
}

// Range implements mvcc.ReadTx.
func (r *reader) Range(ctx context.Context, key, end []byte, rev, limit int64, keysOnly bool) ([]*mvccpb.KeyValue, error) {
	from, to, open := span(key, end)
	if rev < r.latest {
		kvs, _, err := r.rangeAt(ctx, from, to, open, rev, limit, keysOnly, false)
		return kvs, err
	}
	args := []any{from}
	if !open {
		args = append(args, to)
	}
	if limit > 0 {
		args = append(args, limit)
	}
	rows, err := r.query(ctx, r.q.ranges[rangeIndex(open, keysOnly, limit > 0)], args...)
	if err != nil {
		return nil, r.fail("range", err)
	}
	defer rows.Close()
	var kvs []*mvccpb.KeyValue
	if limit > 0 {
		kvs = make([]*mvccpb.KeyValue, 0, min(limit, 1024))
	}
	for rows.Next() {
		kv := &mvccpb.KeyValue{}
		dest := []any{&kv.Key, &kv.CreateRevision, &kv.ModRevision, &kv.Version, &kv.Lease}
		if !keysOnly {
			dest = append(dest, &kv.Value)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, r.fail("range: scan", err)
		}
		kvs = append(kvs, kv)
	}
	if err := rows.Err(); err != nil {
		return nil, r.fail("range", err)
	}
	return kvs, nil
}

// Count implements mvcc.ReadTx.
func (r *reader) Count(ctx context.Context, key, end []byte, rev int64) (int64, error) {
	from, to, open := span(key, end)
	if rev < r.latest {
		_, n, err := r.rangeAt(ctx, from, to, open, rev, 0, true, true)
		return n, err
	}
	args := []any{from}
	if !open {
		args = append(args, to)
	}
	var n int64
	if _, err := r.queryRow(ctx, true, r.q.counts[b2i(open)], []any{&n}, args...); err != nil {
		return 0, r.fail("count", err)
	}
	return n, nil
}

// Get implements mvcc.ReadTx.
func (r *reader) Get(ctx context.Context, key []byte) (*mvccpb.KeyValue, error) {
	return r.get(ctx, key, true)
}

func (r *reader) get(ctx context.Context, key []byte, flush bool) (*mvccpb.KeyValue, error) {
	kv := &mvccpb.KeyValue{}
	found, err := r.queryRow(ctx, flush, sqlGet,
		[]any{&kv.Key, &kv.CreateRevision, &kv.ModRevision, &kv.Version, &kv.Lease, &kv.Value}, nonNil(key))
	if err != nil {
		return nil, r.fail("get", err)
	}
	if !found {
		return nil, nil
	}
	return kv, nil
}

// GetLatest implements mvcc.Backend with one statement on a pool
// connection and no transaction around it: under autocommit an InnoDB
// SELECT is a consistent read of its own, so the row and the revisions
// agree.
func (b *Backend) GetLatest(ctx context.Context, key []byte) (*mvccpb.KeyValue, int64, int64, error) {
	if b.closed.Load() {
		return nil, 0, 0, mvcc.ErrClosed
	}
	if err := b.historyLost(); err != nil {
		return nil, 0, 0, err
	}
	var (
		current, compacted int64
		kv                 mvccpb.KeyValue
		h                  History
	)
	err := b.db.QueryRowContext(ctx, sqlGetLatest, nonNil(key)).Scan(&current, &compacted,
		&h.Recorded, &h.Synced, &h.Current,
		&kv.Key, &kv.CreateRevision, &kv.ModRevision, &kv.Version, &kv.Lease, &kv.Value)
	if err != nil {
		return nil, 0, 0, classify(fmt.Errorf("get latest: %w", err))
	}
	h.Rev = current
	if err := b.checkHistory(h); err != nil {
		return nil, 0, 0, err
	}
	if kv.ModRevision == 0 { // no live row: the key does not exist
		return nil, current, compacted, nil
	}
	return &kv, current, compacted, nil
}

// Changes implements mvcc.ReadTx.
func (r *reader) Changes(ctx context.Context, fromRev, toRev int64, limit int, withPrev bool) ([]mvcc.Change, error) {
	query, args := sqlChanges, []any{fromRev, toRev}
	if limit > 0 {
		query, args = query+" LIMIT ?", append(args, int64(limit))
	}
	rows, err := r.query(ctx, query, args...)
	if err != nil {
		return nil, r.fail("read changes", err)
	}
	defer rows.Close()
	var out []mvcc.Change
	for rows.Next() {
		var (
			c       mvcc.Change
			deleted bool
			kv      = &mvccpb.KeyValue{}
		)
		if err := rows.Scan(&kv.ModRevision, &c.Sub, &kv.Key, &kv.CreateRevision, &kv.Version,
			&kv.Lease, &deleted, &kv.Value); err != nil {
			return nil, r.fail("read changes: scan", err)
		}
		if deleted {
			kv = &mvccpb.KeyValue{Key: kv.Key, ModRevision: kv.ModRevision}
		}
		c.Deleted, c.KV = deleted, kv
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, r.fail("read changes", err)
	}
	if withPrev {
		if err := r.fillPrev(ctx, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// collect reads every row of a query with scan.
func collect[T any](r *reader, ctx context.Context, what, query string, scan func(*sql.Rows) (T, error), args ...any) ([]T, error) {
	rows, err := r.query(ctx, query, args...)
	if err != nil {
		return nil, r.fail(what, err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, r.fail(what+": scan", err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, r.fail(what, err)
	}
	return out, nil
}

// Leases implements mvcc.ReadTx.
func (r *reader) Leases(ctx context.Context) ([]mvcc.Lease, error) {
	return collect(r, ctx, "read leases", sqlLeases, func(rows *sql.Rows) (mvcc.Lease, error) {
		var l mvcc.Lease
		err := rows.Scan(&l.ID, &l.TTL)
		return l, err
	})
}

// Lease implements mvcc.ReadTx.
func (r *reader) Lease(ctx context.Context, id int64) (mvcc.Lease, bool, error) {
	return r.lease(ctx, id, true)
}

func (r *reader) lease(ctx context.Context, id int64, flush bool) (mvcc.Lease, bool, error) {
	var ttl int64
	found, err := r.queryRow(ctx, flush, sqlLease, []any{&ttl}, id)
	if err != nil {
		return mvcc.Lease{}, false, r.fail("read lease", err)
	}
	return mvcc.Lease{ID: id, TTL: ttl}, found, nil
}

// Alarms implements mvcc.ReadTx.
func (r *reader) Alarms(ctx context.Context) ([]*pb.AlarmMember, error) {
	return collect(r, ctx, "read alarms", sqlAlarms, func(rows *sql.Rows) (*pb.AlarmMember, error) {
		var member int64 // see memberColumn
		var typ int32
		err := rows.Scan(&member, &typ)
		return &pb.AlarmMember{MemberID: uint64(member), Alarm: pb.AlarmType(typ)}, err
	})
}

// LeaseKeys implements mvcc.ReadTx.
func (r *reader) LeaseKeys(ctx context.Context, id int64) ([][]byte, error) {
	return collect(r, ctx, "read lease keys", sqlLeaseKeys, func(rows *sql.Rows) ([]byte, error) {
		var k []byte
		err := rows.Scan(&k)
		return k, err
	}, id)
}

// AuthState implements mvcc.ReadTx. In a write transaction the pending
// writes go first, so a PutAuthState of the transaction is seen.
func (r *reader) AuthState(ctx context.Context) ([]byte, error) {
	var state []byte
	found, err := r.queryRow(ctx, true, sqlAuthState, []any{&state})
	if err != nil {
		return nil, r.fail("read auth state", err)
	}
	if !found {
		return nil, nil
	}
	return nonNil(state), nil
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
