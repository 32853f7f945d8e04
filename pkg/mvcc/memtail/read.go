package memtail

import (
	"bytes"
	"cmp"
	"context"
	"slices"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/kite-db/kite/pkg/mvcc"
)

var _ mvcc.ReadTx = (*view)(nil)

// view is a read of the wrapped Backend's committed state (base) with the
// tail's batches that state does not hold yet merged over it, oldest
// first; a write transaction's view ends with its own open batch.
type view struct {
	base              mvcc.ReadTx
	baseCur, baseComp int64
	batches           []*batch
}

// Revisions implements mvcc.ReadTx.
func (v *view) Revisions(context.Context) (current, compacted int64, err error) {
	for i := len(v.batches) - 1; i >= 0; i-- {
		if b := v.batches[i]; b.revs >= 0 {
			o := &b.ops[b.revs]
			return o.current, o.compacted, nil
		}
	}
	return v.baseCur, v.baseComp, nil
}

// newest returns the op of key's newest change in the tail at or below
// rev.
func (v *view) newest(key string, rev int64) (*op, bool) {
	for i := len(v.batches) - 1; i >= 0; i-- {
		if o, ok := v.batches[i].keyAt(key, rev); ok {
			return o, true
		}
	}
	return nil, false
}

// first returns the op of key's first change in the tail.
func (v *view) first(key string) (*op, bool) {
	for _, b := range v.batches {
		if o, ok := b.firstOf(key); ok {
			return o, true
		}
	}
	return nil, false
}

// changed returns, for every key in [key, end) that the tail changed at or
// below rev, the op of its newest such change.
func (v *view) changed(key, end []byte, rev int64) map[string]*op {
	out := map[string]*op{}
	for _, b := range v.batches {
		for k := range b.byKey {
			if !mvcc.InRange([]byte(k), key, end) {
				continue
			}
			if o, ok := b.keyAt(k, rev); ok {
				out[k] = o
			}
		}
	}
	return out
}

// Range implements mvcc.ReadTx: the base's rows with the tail's changes
// over them. With a limit the base is asked for as many more rows as the
// tail changed keys, since each of those may drop one of the base's rows.
func (v *view) Range(ctx context.Context, key, end []byte, rev, limit int64, keysOnly bool) ([]*mvccpb.KeyValue, error) {
	if rev <= v.baseCur || len(v.batches) == 0 {
		return v.base.Range(ctx, key, end, rev, limit, keysOnly)
	}
	changed := v.changed(key, end, rev)
	var rows []*mvccpb.KeyValue
	if v.baseCur > 0 {
		baseLimit := limit
		if limit > 0 {
			baseLimit += int64(len(changed))
		}
		var err error
		if rows, err = v.base.Range(ctx, key, end, v.baseCur, baseLimit, keysOnly); err != nil {
			return nil, err
		}
	}
	if len(changed) == 0 {
		return rows, nil
	}
	out := make([]*mvccpb.KeyValue, 0, len(rows)+len(changed))
	for _, kv := range rows {
		if _, ok := changed[string(kv.Key)]; !ok {
			out = append(out, kv)
		}
	}
	for _, o := range changed {
		kv, live := o.live()
		if !live {
			continue
		}
		kv = clone(kv)
		if keysOnly {
			kv.Value = nil
		}
		out = append(out, kv)
	}
	slices.SortFunc(out, func(a, b *mvccpb.KeyValue) int { return bytes.Compare(a.Key, b.Key) })
	if limit > 0 && int64(len(out)) > limit {
		out = out[:limit]
	}
	return out, nil
}

// Count implements mvcc.ReadTx: the base's count, plus one for each key
// the tail made live, minus one for each it removed.
func (v *view) Count(ctx context.Context, key, end []byte, rev int64) (int64, error) {
	if rev <= v.baseCur || len(v.batches) == 0 {
		return v.base.Count(ctx, key, end, rev)
	}
	var n int64
	if v.baseCur > 0 {
		var err error
		if n, err = v.base.Count(ctx, key, end, v.baseCur); err != nil {
			return 0, err
		}
	}
	for k, o := range v.changed(key, end, rev) {
		if _, live := o.live(); live {
			n++
		}
		if f, _ := v.first(k); f.liveBefore {
			n--
		}
	}
	return n, nil
}

// Get implements mvcc.ReadTx.
func (v *view) Get(ctx context.Context, key []byte) (*mvccpb.KeyValue, error) {
	if o, ok := v.newest(string(key), maxRev); ok {
		kv, _ := o.live()
		return clone(kv), nil
	}
	return v.base.Get(ctx, key)
}

// clone copies a row of the tail for a caller, who may change it (a
// keys-only answer drops the value in place); the tail's rows are shared
// by every read. The bytes are shared: no caller writes into them.
func clone(kv *mvccpb.KeyValue) *mvccpb.KeyValue {
	if kv == nil {
		return nil
	}
	return &mvccpb.KeyValue{Key: kv.Key, Value: kv.Value, CreateRevision: kv.CreateRevision,
		ModRevision: kv.ModRevision, Version: kv.Version, Lease: kv.Lease}
}

// withoutValue is clone without the value.
func withoutValue(kv *mvccpb.KeyValue) *mvccpb.KeyValue {
	if kv == nil {
		return nil
	}
	return &mvccpb.KeyValue{Key: kv.Key, CreateRevision: kv.CreateRevision,
		ModRevision: kv.ModRevision, Version: kv.Version, Lease: kv.Lease}
}

// maxRev is above every revision.
const maxRev = int64(^uint64(0) >> 1)

// Changes implements mvcc.ReadTx: the base's rows up to its revision, then
// the tail's.
func (v *view) Changes(ctx context.Context, fromRev, toRev int64, limit int, withPrev bool) ([]mvcc.Change, error) {
	var out []mvcc.Change
	if fromRev <= v.baseCur && v.baseCur > 0 {
		var err error
		if out, err = v.base.Changes(ctx, fromRev, min(toRev, v.baseCur), limit, withPrev); err != nil {
			return nil, err
		}
		if limit > 0 && len(out) >= limit {
			return out, nil
		}
	}
	// prev: each key's row before the change being listed, as the tail
	// goes along; a key not seen yet takes its row from the base.
	prev := map[string]*mvccpb.KeyValue{}
	for _, b := range v.batches {
		for i := range b.ops {
			o := &b.ops[i]
			if o.kind != opPut && o.kind != opDelete {
				continue
			}
			k := string(o.kv.Key)
			rev := o.kv.ModRevision
			if rev > toRev {
				return out, nil
			}
			if rev >= fromRev && rev > v.baseCur {
				c := mvcc.Change{Sub: o.sub, Deleted: o.kind == opDelete, KV: clone(o.kv)}
				if withPrev {
					p, seen := prev[k]
					if !seen {
						var err error
						if p, err = v.baseRow(ctx, o.kv.Key); err != nil {
							return nil, err
						}
					}
					c.PrevKV = clone(p)
				}
				out = append(out, c)
				if limit > 0 && len(out) >= limit {
					return out, nil
				}
			}
			if withPrev {
				kv, _ := o.live()
				prev[k] = kv
			}
		}
	}
	return out, nil
}

// baseRow is key's live row in the base, nil if none.
func (v *view) baseRow(ctx context.Context, key []byte) (*mvccpb.KeyValue, error) {
	if v.baseCur == 0 {
		return nil, nil
	}
	return v.base.Get(ctx, key)
}

// Leases implements mvcc.ReadTx.
func (v *view) Leases(ctx context.Context) ([]mvcc.Lease, error) {
	ls, err := v.base.Leases(ctx)
	if err != nil {
		return nil, err
	}
	touched := false
	byID := map[int64]mvcc.Lease{}
	for _, b := range v.batches {
		if !b.leases {
			continue
		}
		if !touched {
			for _, l := range ls {
				byID[l.ID] = l
			}
			touched = true
		}
		for i := range b.ops {
			switch o := &b.ops[i]; o.kind {
			case opPutLease:
				byID[o.lease.ID] = o.lease
			case opDeleteLease:
				delete(byID, o.lease.ID)
			}
		}
	}
	if !touched {
		return ls, nil
	}
	out := make([]mvcc.Lease, 0, len(byID))
	for _, l := range byID {
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b mvcc.Lease) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// Lease implements mvcc.ReadTx.
func (v *view) Lease(ctx context.Context, id int64) (mvcc.Lease, bool, error) {
	for i := len(v.batches) - 1; i >= 0; i-- {
		b := v.batches[i]
		if !b.leases {
			continue
		}
		for j := len(b.ops) - 1; j >= 0; j-- {
			switch o := &b.ops[j]; {
			case o.kind == opPutLease && o.lease.ID == id:
				return o.lease, true, nil
			case o.kind == opDeleteLease && o.lease.ID == id:
				return mvcc.Lease{}, false, nil
			}
		}
	}
	return v.base.Lease(ctx, id)
}

// Alarms implements mvcc.ReadTx.
func (v *view) Alarms(ctx context.Context) ([]*pb.AlarmMember, error) {
	as, err := v.base.Alarms(ctx)
	if err != nil {
		return nil, err
	}
	type alarmKey struct {
		member uint64
		alarm  pb.AlarmType
	}
	var set map[alarmKey]*pb.AlarmMember
	for _, b := range v.batches {
		if !b.alarms {
			continue
		}
		if set == nil {
			set = map[alarmKey]*pb.AlarmMember{}
			for _, a := range as {
				set[alarmKey{a.MemberID, a.Alarm}] = a
			}
		}
		for i := range b.ops {
			switch o := &b.ops[i]; o.kind {
			case opPutAlarm:
				set[alarmKey{o.alarm.MemberID, o.alarm.Alarm}] = o.alarm
			case opDeleteAlarm:
				delete(set, alarmKey{o.alarm.MemberID, o.alarm.Alarm})
			}
		}
	}
	if set == nil {
		return as, nil
	}
	out := make([]*pb.AlarmMember, 0, len(set))
	for _, a := range set {
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b *pb.AlarmMember) int {
		// The base's order: member IDs as the signed integers SQL stores.
		if c := cmp.Compare(int64(a.MemberID), int64(b.MemberID)); c != 0 {
			return c
		}
		return int(a.Alarm) - int(b.Alarm)
	})
	return out, nil
}

// LeaseKeys implements mvcc.ReadTx: the base's keys of the lease, where
// the tail changed a key its newest change decides.
func (v *view) LeaseKeys(ctx context.Context, id int64) ([][]byte, error) {
	keys, err := v.base.LeaseKeys(ctx, id)
	if err != nil || len(v.batches) == 0 {
		return keys, err
	}
	decided := map[string]bool{}
	for i := len(v.batches) - 1; i >= 0; i-- {
		for k := range v.batches[i].byKey {
			if _, done := decided[k]; done {
				continue
			}
			o, _ := v.batches[i].keyAt(k, maxRev)
			kv, live := o.live()
			decided[k] = live && kv.Lease == id
		}
	}
	out := make([][]byte, 0, len(keys))
	for _, k := range keys {
		if _, ok := decided[string(k)]; !ok {
			out = append(out, k)
		}
	}
	for k, attached := range decided {
		if attached {
			out = append(out, []byte(k))
		}
	}
	slices.SortFunc(out, bytes.Compare)
	return out, nil
}

// AuthState implements mvcc.ReadTx.
func (v *view) AuthState(ctx context.Context) ([]byte, error) {
	for i := len(v.batches) - 1; i >= 0; i-- {
		if b := v.batches[i]; b.auth >= 0 {
			return b.ops[b.auth].auth, nil
		}
	}
	return v.base.AuthState(ctx)
}

// Rollback implements mvcc.ReadTx.
func (v *view) Rollback() error { return v.base.Rollback() }
