package mvcc

import (
	"context"
	"errors"
	"fmt"
	"slices"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"
)

// evaluator gives one write request its meaning. It runs inside a WriteTx at a
// known revision and is deterministic: no clock, no randomness, no map
// iteration in its output. The same code serves every storage mode, so a
// raft replica applying the same requests in the same order writes the same
// rows.
type evaluator struct {
	ctx context.Context
	// tx reads; w writes, and is the same transaction. A read-only txn
	// (IsReadOnlyTxn) is evaluated with w nil: it reaches no write.
	tx        ReadTx
	w         WriteTx
	current   int64 // revision before this request
	compacted int64
	changes   []Change
	deleted   bool // the request has deleted a key
	// expiry: the request is a lease revoke of the expiry loop, checked
	// against the storage's clock where it keeps one (LeaseExpiryTx).
	expiry bool
	// before holds the live rows a txn read while it had not written
	// yet (liveRow): its compares and the checks of its puts. checked
	// keeps them while the txn runs its operations (rowsToDelete).
	before, checked map[string]*mvccpb.KeyValue
	// prevValues says a watcher may send the value of a row this request
	// replaces (the hub has a prev_kv watcher): a put or delete then
	// reads whole rows. Without it, one outside a txn whose request does
	// not ask for prev_kv reads the row without its value (liveMeta), and
	// its change is marked PartialPrev. It does not change what is
	// written, so replicas that differ in it write the same rows.
	prevValues bool
}

// wholeRows says whether a put or delete reads the rows it replaces with
// their values: when the request asks for them (want), a watcher may send
// them, or it runs in a txn, whose compares and reads share its rows
// (liveRow).
func (a *evaluator) wholeRows(want bool) bool {
	return want || a.prevValues || a.before != nil || a.checked != nil
}

// liveMeta returns the live row of key for a put or delete, without its
// value unless wholeRows(want); partial says it lacks the value.
func (a *evaluator) liveMeta(key []byte, want bool) (kv *mvccpb.KeyValue, partial bool, err error) {
	if a.wholeRows(want) {
		kv, err = a.liveRow(key)
		return kv, false, err
	}
	m, ok := a.tx.(RowMetaReader)
	if !ok {
		kv, err = a.tx.Get(a.ctx, key)
		return kv, false, err
	}
	kv, err = m.GetMeta(a.ctx, key)
	return kv, kv != nil, err
}

// liveRow returns the live row of key (nil if the key does not exist).
// Inside a txn, before it writes, a key is read once: kube-apiserver's
// update compares a key's mod revision and puts the same key, and the
// second read of the row was a tenth of the CPU of such a txn.
func (a *evaluator) liveRow(key []byte) (*mvccpb.KeyValue, error) {
	if kv, ok := a.before[string(key)]; ok {
		return kv, nil
	}
	kv, err := a.tx.Get(a.ctx, key)
	if err != nil {
		return nil, err
	}
	if a.before != nil {
		a.before[string(key)] = kv
	}
	return kv, nil
}

// leaseExists asks the transaction, which sees grants and revokes made
// earlier in the same batch and, with several Stores on one database, by
// the other Stores: memory would know only this one's.
func (a *evaluator) leaseExists(id int64) (bool, error) {
	_, ok, err := a.tx.Lease(a.ctx, id)
	if err != nil {
		return false, fmt.Errorf("look up lease %d: %w", id, err)
	}
	return ok, nil
}

// applyResult is what one request produced.
type applyResult struct {
	resp    proto.Message
	changes []Change
	// compacted is set when a Compaction request moved the compacted revision.
	compacted int64
	// granted / revoked report lease table changes for the lessor.
	granted *Lease
	revoked int64
	// alarms is the whole alarm list after an Alarm request changed it.
	alarms []*pb.AlarmMember
}

// isRequestError reports whether err rejects one request without touching
// storage (the batch goes on) rather than failing the storage transaction.
func isRequestError(err error) bool {
	for _, e := range []error{ErrCompacted, ErrFutureRev, ErrLeaseNotFound, ErrLeaseExists,
		ErrLeaseTTLTooLarge, ErrKeyNotFound, errLeaseRenewed} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// apply evaluates one request. A request error (isRequestError) is returned
// before anything is written.
func (a *evaluator) apply(r *pb.InternalRaftRequest) (*applyResult, error) {
	var (
		res = &applyResult{}
		err error
	)
	switch {
	case r.Put != nil:
		res.resp, err = a.applyPut(r.Put)
	case r.DeleteRange != nil:
		res.resp, err = a.applyDeleteRange(r.DeleteRange)
	case r.Txn != nil:
		res.resp, err = a.applyTxn(r.Txn)
	case r.Compaction != nil:
		res.resp, res.compacted, err = a.applyCompaction(r.Compaction)
	case r.LeaseGrant != nil:
		res.resp, res.granted, err = a.applyLeaseGrant(r.LeaseGrant)
	case r.LeaseRevoke != nil:
		res.resp, err = a.applyLeaseRevoke(r.LeaseRevoke)
		res.revoked = r.LeaseRevoke.ID
	case r.Alarm != nil:
		res.resp, res.alarms, err = a.applyAlarm(r.Alarm)
	default:
		return nil, fmt.Errorf("mvcc: unsupported write request %v", r)
	}
	if err != nil {
		return nil, err
	}
	res.changes = a.changes
	return res, nil
}

// readRev is the revision reads inside the request see: its own writes once
// it has made any, as in etcd.
func (a *evaluator) readRev() int64 {
	if len(a.changes) > 0 {
		return a.current + 1
	}
	return a.current
}

// checkPut validates a put against the state before the request and returns
// the key's previous row (needed for ignore_value, ignore_lease and prev_kv),
// without its value when partial (liveMeta).
func (a *evaluator) checkPut(p *pb.PutRequest) (prev *mvccpb.KeyValue, partial bool, err error) {
	if p.Lease != 0 {
		ok, err := a.leaseExists(p.Lease)
		if err != nil {
			return nil, false, err
		}
		if !ok {
			return nil, false, ErrLeaseNotFound
		}
	}
	prev, partial, err = a.liveMeta(p.Key, p.PrevKv || p.IgnoreValue)
	if err != nil {
		return nil, false, fmt.Errorf("get previous kv: %w", err)
	}
	if (p.IgnoreValue || p.IgnoreLease) && prev == nil {
		return nil, false, ErrKeyNotFound
	}
	return prev, partial, nil
}

func (a *evaluator) applyPut(p *pb.PutRequest) (*pb.PutResponse, error) {
	prev, partial, err := a.checkPut(p)
	if err != nil {
		return nil, err
	}
	return a.put(p, prev, partial)
}

// put writes a put whose checks have passed; partial says prev lacks its
// value.
func (a *evaluator) put(p *pb.PutRequest, prev *mvccpb.KeyValue, partial bool) (*pb.PutResponse, error) {
	rev := a.current + 1
	kv := &mvccpb.KeyValue{Key: p.Key, Value: p.Value, Lease: p.Lease, ModRevision: rev, CreateRevision: rev, Version: 1}
	if prev != nil {
		kv.CreateRevision = prev.CreateRevision
		kv.Version = prev.Version + 1
		if p.IgnoreValue {
			kv.Value = prev.Value
		}
		if p.IgnoreLease {
			kv.Lease = prev.Lease
		}
	}
	sub := int64(len(a.changes))
	if err := a.w.Put(a.ctx, kv, sub); err != nil {
		return nil, fmt.Errorf("put %q: %w", p.Key, err)
	}
	a.changes = append(a.changes, Change{Sub: sub, KV: kv, PrevKV: prev, PartialPrev: partial})
	resp := &pb.PutResponse{Header: &pb.ResponseHeader{Revision: rev}}
	if p.PrevKv {
		resp.PrevKv = prev
	}
	return resp, nil
}

func (a *evaluator) applyDeleteRange(d *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	kvs, partial, err := a.rowsToDelete(d)
	if err != nil {
		return nil, err
	}
	resp := &pb.DeleteRangeResponse{Header: &pb.ResponseHeader{}}
	if d.PrevKv {
		resp.PrevKvs = kvs
	}
	if err := a.deleteKVs(kvs, partial); err != nil {
		return nil, err
	}
	resp.Deleted = int64(len(kvs))
	resp.Header.Revision = a.readRev()
	return resp, nil
}

// rowsToDelete returns the live rows d removes, without their values when
// partial (as liveMeta decides: a tombstone needs no field of the row it
// ends). A txn that deletes one key it read before writing anything
// removes the row it read: kube-apiserver deletes an object with a txn
// that compares the key's mod revision and deletes the key, and reading
// the row a second time was the largest read of that txn.
func (a *evaluator) rowsToDelete(d *pb.DeleteRangeRequest) (kvs []*mvccpb.KeyValue, partial bool, err error) {
	if len(d.RangeEnd) == 0 && len(a.changes) == 0 {
		if kv, ok := a.checked[string(d.Key)]; ok {
			if kv == nil {
				return nil, false, nil
			}
			return []*mvccpb.KeyValue{kv}, false, nil
		}
	}
	partial = !a.wholeRows(d.PrevKv)
	if partial && len(d.RangeEnd) == 0 {
		kv, p, err := a.liveMeta(d.Key, false)
		if err != nil || kv == nil {
			return nil, false, err
		}
		return []*mvccpb.KeyValue{kv}, p, nil
	}
	// A keys-only range has every field of the rows but their values.
	kvs, err = a.tx.Range(a.ctx, d.Key, rangeEnd(d.RangeEnd), a.readRev(), 0, partial)
	if err != nil {
		return nil, false, fmt.Errorf("range keys to delete: %w", err)
	}
	return kvs, partial && len(kvs) > 0, nil
}

// deleteKVs writes a tombstone for each of kvs, in the given (key) order;
// partial says kvs lack their values.
func (a *evaluator) deleteKVs(kvs []*mvccpb.KeyValue, partial bool) error {
	if len(kvs) == 0 {
		return nil
	}
	rev := a.current + 1
	a.deleted = true
	for _, kv := range kvs {
		sub := int64(len(a.changes))
		if err := a.w.Delete(a.ctx, kv.Key, rev, sub); err != nil {
			return fmt.Errorf("delete %q: %w", kv.Key, err)
		}
		a.changes = append(a.changes, Change{
			Sub: sub, Deleted: true,
			KV:          &mvccpb.KeyValue{Key: kv.Key, ModRevision: rev},
			PrevKV:      kv,
			PartialPrev: partial,
		})
	}
	return nil
}

func (a *evaluator) applyCompaction(c *pb.CompactionRequest) (*pb.CompactionResponse, int64, error) {
	switch {
	case c.Revision <= a.compacted:
		return nil, 0, ErrCompacted
	case c.Revision > a.current:
		return nil, 0, ErrFutureRev
	}
	if err := a.w.SetRevisions(a.ctx, a.current, c.Revision); err != nil {
		return nil, 0, fmt.Errorf("set compacted revision: %w", err)
	}
	a.compacted = c.Revision
	return &pb.CompactionResponse{Header: &pb.ResponseHeader{Revision: a.current}}, c.Revision, nil
}

func (a *evaluator) applyLeaseGrant(g *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, *Lease, error) {
	switch ok, err := a.leaseExists(g.ID); {
	case err != nil:
		return nil, nil, err
	case ok:
		return nil, nil, ErrLeaseExists
	}
	l := Lease{ID: g.ID, TTL: g.TTL}
	if err := a.w.PutLease(a.ctx, l); err != nil {
		return nil, nil, fmt.Errorf("grant lease %d: %w", g.ID, err)
	}
	resp := &pb.LeaseGrantResponse{Header: &pb.ResponseHeader{Revision: a.current}, ID: l.ID, TTL: l.TTL}
	return resp, &l, nil
}

// applyLeaseRevoke deletes the lease's keys in key order in one revision, as
// etcd's lessor does, then the lease.
func (a *evaluator) applyLeaseRevoke(r *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	switch ok, err := a.leaseExists(r.ID); {
	case err != nil:
		return nil, err
	case !ok:
		return nil, ErrLeaseNotFound
	}
	if et, ok := a.w.(LeaseExpiryTx); ok && a.expiry {
		switch expired, err := et.LeaseExpired(a.ctx, r.ID); {
		case err != nil:
			return nil, fmt.Errorf("lease %d expired?: %w", r.ID, err)
		case !expired:
			return nil, errLeaseRenewed
		}
	}
	keys, err := a.tx.LeaseKeys(a.ctx, r.ID)
	if err != nil {
		return nil, fmt.Errorf("keys of lease %d: %w", r.ID, err)
	}
	var kvs []*mvccpb.KeyValue
	for _, k := range keys {
		kv, err := a.tx.Get(a.ctx, k)
		if err != nil {
			return nil, fmt.Errorf("get %q: %w", k, err)
		}
		if kv != nil {
			kvs = append(kvs, kv)
		}
	}
	if err := a.deleteKVs(kvs, false); err != nil {
		return nil, err
	}
	if err := a.w.DeleteLease(a.ctx, r.ID); err != nil {
		return nil, fmt.Errorf("revoke lease %d: %w", r.ID, err)
	}
	return &pb.LeaseRevokeResponse{Header: &pb.ResponseHeader{Revision: a.readRev()}}, nil
}

// applyAlarm activates or deactivates one member's alarm. As in etcd, the
// answer lists the alarm only if the request changed it.
func (a *evaluator) applyAlarm(r *pb.AlarmRequest) (*pb.AlarmResponse, []*pb.AlarmMember, error) {
	resp := &pb.AlarmResponse{Header: &pb.ResponseHeader{Revision: a.current}}
	alarms, err := a.tx.Alarms(a.ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("read alarms: %w", err)
	}
	m := &pb.AlarmMember{MemberID: r.MemberID, Alarm: r.Alarm}
	active := slices.ContainsFunc(alarms, func(x *pb.AlarmMember) bool {
		return x.MemberID == m.MemberID && x.Alarm == m.Alarm
	})
	switch {
	case r.Action == pb.AlarmRequest_ACTIVATE && r.Alarm != pb.AlarmType_NONE && !active:
		err = a.w.PutAlarm(a.ctx, m)
	case r.Action == pb.AlarmRequest_DEACTIVATE && active:
		err = a.w.DeleteAlarm(a.ctx, m)
	default:
		return resp, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("change alarm %v: %w", m, err)
	}
	resp.Alarms = []*pb.AlarmMember{m}
	if alarms, err = a.tx.Alarms(a.ctx); err != nil {
		return nil, nil, fmt.Errorf("read alarms: %w", err)
	}
	// Non-nil even when empty: the writer tells "changed to none" from
	// "unchanged" by it.
	return resp, append([]*pb.AlarmMember{}, alarms...), nil
}
