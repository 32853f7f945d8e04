package memtail

import (
	"context"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/kite-db/kite/pkg/mvcc"
)

// opKind says which WriteTx method an op replays.
type opKind uint8

const (
	opPut opKind = iota + 1
	opDelete
	opSetRevisions
	opPutLease
	opDeleteLease
	opPutAuth
	opPutAlarm
	opDeleteAlarm
	opCompact
)

// op is one call of a WriteTx method, kept to be served by reads and
// replayed into the wrapped Backend by a flush.
type op struct {
	kind opKind
	// kv: opPut's row; opDelete's key with ModRevision set to its revision.
	kv  *mvccpb.KeyValue
	sub int64
	// liveBefore: opPut's and opDelete's key was live just before the
	// change. Count needs it for a key's first change in the tail; it is
	// found when the change is written, since not every writer keeps
	// etcd's rules (a copy from a compacted source writes tombstones of
	// keys whose puts are gone).
	liveBefore bool
	// lease: opPutLease (ID and TTL), opDeleteLease (ID).
	lease mvcc.Lease
	auth  []byte
	alarm *pb.AlarmMember
	// current, compacted: opSetRevisions; compacted, from, to: opCompact.
	current, compacted, from, to int64
}

// replay makes the op's call on tx.
func (o *op) replay(ctx context.Context, tx mvcc.WriteTx) error {
	switch o.kind {
	case opPut:
		return tx.Put(ctx, o.kv, o.sub)
	case opDelete:
		return tx.Delete(ctx, o.kv.Key, o.kv.ModRevision, o.sub)
	case opSetRevisions:
		return tx.SetRevisions(ctx, o.current, o.compacted)
	case opPutLease:
		return tx.PutLease(ctx, o.lease)
	case opDeleteLease:
		return tx.DeleteLease(ctx, o.lease.ID)
	case opPutAuth:
		return tx.PutAuthState(ctx, o.auth)
	case opPutAlarm:
		return tx.PutAlarm(ctx, o.alarm)
	case opDeleteAlarm:
		return tx.DeleteAlarm(ctx, o.alarm)
	case opCompact:
		_, err := tx.CompactBatch(ctx, o.compacted, o.from, o.to)
		return err
	}
	return fmt.Errorf("memtail: unknown op %d", o.kind)
}

// batch is one committed write transaction. It is immutable once it is in
// the tail: reads hold batches without a lock. One transaction may hold
// many revisions (the Store's group commit puts a batch of requests in
// one), in ascending order.
type batch struct {
	index uint64 // its applied index: what the wrapped Backend records once it holds it
	ops   []op
	// byKey maps a key to the positions in ops of its puts and deletes, in
	// order.
	byKey map[string][]int
	// leases, alarms: whether ops hold any, so reads skip the batch
	// cheaply.
	leases, alarms bool
	auth           int // position of the last opPutAuth, or -1
	revs           int // position of the last opSetRevisions, or -1
}

func newBatch() *batch {
	return &batch{byKey: map[string][]int{}, auth: -1, revs: -1}
}

func (b *batch) add(o op) {
	switch o.kind {
	case opPut, opDelete:
		k := string(o.kv.Key)
		b.byKey[k] = append(b.byKey[k], len(b.ops))
	case opPutLease, opDeleteLease:
		b.leases = true
	case opPutAlarm, opDeleteAlarm:
		b.alarms = true
	case opPutAuth:
		b.auth = len(b.ops)
	case opSetRevisions:
		b.revs = len(b.ops)
	}
	b.ops = append(b.ops, o)
}

// keyAt returns the op of key's newest change at or below rev in b.
func (b *batch) keyAt(key string, rev int64) (*op, bool) {
	pos := b.byKey[key]
	for i := len(pos) - 1; i >= 0; i-- {
		if o := &b.ops[pos[i]]; o.kv.ModRevision <= rev {
			return o, true
		}
	}
	return nil, false
}

// firstOf returns the op of key's first change in b.
func (b *batch) firstOf(key string) (*op, bool) {
	pos := b.byKey[key]
	if len(pos) == 0 {
		return nil, false
	}
	return &b.ops[pos[0]], true
}

// live reports whether the op leaves its key live, and the row.
func (o *op) live() (*mvccpb.KeyValue, bool) {
	if o.kind == opPut {
		return o.kv, true
	}
	return nil, false
}
