package storetest

import (
	"fmt"
	"math/rand/v2"
	"slices"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"

	"github.com/kite-db/kite/pkg/mvcc"
)

// keySpace is small on purpose, so that keys are overwritten, deleted and
// created again all the time. It has two prefixes, the keys on their
// boundaries ("/a" before "/a/", "/a0" just past it), and keys holding the
// smallest and largest bytes, which a driver's collation or encoding can
// get wrong.
func keySpace() []string {
	var ks []string
	for i := range 10 {
		ks = append(ks, fmt.Sprintf("/a/%d", i), fmt.Sprintf("/b/%d", i))
	}
	return append(ks, "/a", "/a0", "/a/\xff", "/b/\x00\x00", "\x00", "\xff")
}

// prefixes of the ranges read and deleted; "\xff" has no prefix end, so
// its range is every key from it on, as clientv3's WithPrefix makes it.
var prefixes = []string{"/a/", "/b/", "/", "/a", "/a/\xff", "/b/\x00", "\x00", "\xff"}

// keys read but never written: a range may start or end between keys.
var missing = []string{"/a/5\x00", "/c", "/a/", "/b/9\xff", "\x01"}

// values tie often, so that a sort by value has ties to order.
var values = []string{"", "v0", "v1", "v2", "v3", "\x00", "\xff\x00"}

// prefixEnd is the range end of every key with prefix p (clientv3's
// GetPrefixRangeEnd): p with its last byte below 0xff incremented, or
// "\x00" (every key from p on) when there is none.
func prefixEnd(p []byte) []byte {
	end := slices.Clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return []byte{0}
}

// gen makes random requests that etcd's server would accept (pkg/server
// rejects malformed ones before the Store sees them), with operands drawn
// from the model so that compares, revisions and leases are sometimes
// right and sometimes wrong.
type gen struct {
	rng  *rand.Rand
	m    *model
	keys []string
	// leasePool is where explicit lease IDs come from: small, so that a
	// grant sometimes names a lease that exists.
	leasePool []int64
}

func newGen(rng *rand.Rand, m *model) *gen {
	return &gen{rng: rng, m: m, keys: keySpace(), leasePool: []int64{1, 2, 3, 5, 8, 13}}
}

func (g *gen) chance(p float64) bool { return g.rng.Float64() < p }

func pick[T any](g *gen, xs []T) T { return xs[g.rng.IntN(len(xs))] }

func (g *gen) key() []byte { return []byte(pick(g, g.keys)) }

// readKey is a key for a read: now and then one that is never written.
func (g *gen) readKey() []byte {
	if g.chance(0.1) {
		return []byte(pick(g, missing))
	}
	return g.key()
}

func (g *gen) value() []byte {
	if g.chance(0.03) {
		// A value large enough to span pages of a driver's history reads.
		b := make([]byte, 700+g.rng.IntN(700))
		for i := range b {
			b[i] = byte('a' + g.rng.IntN(26))
		}
		return b
	}
	return []byte(pick(g, values))
}

// selector kinds: one key, a prefix, [key, end), from a key on, everything.
const (
	selKey = iota
	selPrefix
	selInterval
	selFromKey
	selAll
)

// selector returns a random key range. weights gives the odds of each kind.
func (g *gen) selector(weights [5]int) (key, end []byte) {
	total := 0
	for _, w := range weights {
		total += w
	}
	n := g.rng.IntN(total)
	kind := 0
	for ; n >= weights[kind]; kind++ {
		n -= weights[kind]
	}
	switch kind {
	case selKey:
		return g.readKey(), nil
	case selPrefix:
		p := []byte(pick(g, prefixes))
		return p, prefixEnd(p)
	case selInterval:
		a, b := g.readKey(), g.readKey()
		if string(a) > string(b) && g.chance(0.9) {
			a, b = b, a // mostly a real interval, now and then an empty one
		}
		return a, b
	case selFromKey:
		return g.readKey(), []byte{0}
	}
	return []byte{0}, []byte{0}
}

var readSelectors = [5]int{selKey: 3, selPrefix: 3, selInterval: 3, selFromKey: 2, selAll: 2}

// rangeReq is a read at rev with random options: limits (negative ones
// mean none), count and keys only, every sort order and target, revision
// filters around the revisions that exist.
func (g *gen) rangeReq(rev int64) *pb.RangeRequest {
	key, end := g.selector(readSelectors)
	r := &pb.RangeRequest{Key: key, RangeEnd: end, Revision: rev, Serializable: g.chance(0.5)}
	if g.chance(0.35) {
		r.Limit = pick(g, []int64{1, 1, 2, 3, 5, 8, -1, 1000})
	}
	r.CountOnly = g.chance(0.08)
	r.KeysOnly = g.chance(0.25)
	if g.chance(0.45) {
		r.SortOrder = pb.RangeRequest_SortOrder(g.rng.IntN(3))
		r.SortTarget = pb.RangeRequest_SortTarget(g.rng.IntN(5))
	}
	if g.chance(0.25) {
		filter := func() int64 {
			if g.chance(0.5) {
				return 0
			}
			return g.rng.Int64N(g.m.current + 2)
		}
		r.MinModRevision, r.MaxModRevision = filter(), filter()
		r.MinCreateRevision, r.MaxCreateRevision = filter(), filter()
	}
	return r
}

// readRev is a revision a read may name: any the Store still holds, now
// and then 0 (the current one).
func (g *gen) readRev() int64 {
	if g.chance(0.15) {
		return 0
	}
	lo := max(g.m.compacted, 1)
	return lo + g.rng.Int64N(g.m.current-lo+1)
}

// liveLease returns a random live lease, or 0 when there is none. It
// picks among the leases in the order they were granted, not by ID: the
// Store chooses some IDs at random, and a replay must pick the same lease.
func (g *gen) liveLease() int64 {
	if len(g.m.granted) == 0 {
		return 0
	}
	return pick(g, g.m.granted)
}

// unknownLease is an ID no lease has.
func (g *gen) unknownLease() int64 {
	for id := int64(1000); ; id++ {
		if _, ok := g.m.leases[id]; !ok {
			return id
		}
	}
}

// put is a random put. ignore allows ignore_value and ignore_lease.
func (g *gen) put(ignore bool) *pb.PutRequest {
	p := &pb.PutRequest{Key: g.key(), Value: g.value(), PrevKv: g.chance(0.5)}
	if ignore {
		switch g.rng.IntN(12) {
		case 0:
			p.IgnoreValue, p.Value = true, nil
		case 1:
			p.IgnoreLease = true
		case 2:
			p.IgnoreValue, p.Value, p.IgnoreLease = true, nil, true
		}
	}
	if !p.IgnoreLease {
		switch x := g.rng.Float64(); {
		case x < 0.03:
			p.Lease = g.unknownLease()
		case x < 0.35:
			p.Lease = g.liveLease()
		}
	}
	return p
}

var deleteSelectors = [5]int{selKey: 10, selPrefix: 3, selInterval: 3, selFromKey: 1, selAll: 1}

func (g *gen) deleteRange() *pb.DeleteRangeRequest {
	key, end := g.selector(deleteSelectors)
	return &pb.DeleteRangeRequest{Key: key, RangeEnd: end, PrevKv: g.chance(0.5)}
}

// compare is a random compare whose operand is drawn near the compared
// key's current row, so that it holds about as often as not.
func (g *gen) compare() *pb.Compare {
	c := &pb.Compare{Key: g.key(), Target: pb.Compare_CompareTarget(g.rng.IntN(5)), Result: pb.Compare_CompareResult(g.rng.IntN(4))}
	if g.chance(0.15) {
		c.Key, c.RangeEnd = g.selector([5]int{selPrefix: 3, selInterval: 2, selFromKey: 1})
	}
	kv := &mvccpb.KeyValue{}
	if ks := keysIn(g.m.live(), c.Key, c.RangeEnd); len(ks) > 0 {
		kv = g.m.live()[pick(g, ks)]
	}
	near := func(n int64) int64 { return max(0, n+g.rng.Int64N(3)-1) }
	switch c.Target {
	case pb.Compare_VALUE:
		v := kv.Value
		if g.chance(0.4) {
			v = g.value()
		}
		c.TargetUnion = &pb.Compare_Value{Value: v}
	case pb.Compare_VERSION:
		c.TargetUnion = &pb.Compare_Version{Version: near(kv.Version)}
	case pb.Compare_CREATE:
		c.TargetUnion = &pb.Compare_CreateRevision{CreateRevision: near(kv.CreateRevision)}
	case pb.Compare_MOD:
		c.TargetUnion = &pb.Compare_ModRevision{ModRevision: near(kv.ModRevision)}
	case pb.Compare_LEASE:
		l := kv.Lease
		if g.chance(0.4) {
			l = g.liveLease()
		}
		c.TargetUnion = &pb.Compare_Lease{Lease: l}
	}
	return c
}

// txnScope is what one top-level branch of a txn has put and deleted, so
// that the branch passes etcd's check that no key is put twice or put and
// deleted (checkIntervals). It is stricter than etcd's check (nested
// branches share it), never looser. A delete with range_end "\x00" is
// invisible to etcd's check, so a branch may delete every key from some key
// on and put one of them again; such a branch takes no ignore_value or
// ignore_lease put (etcd checks those against the state before the txn and
// then reads the deleted key's row when it executes them, which fails).
type txnScope struct {
	puts    map[string]bool
	dels    [][2]string // [begin, end) of the deletes other than from-key
	fromKey bool        // the branch has a from-key delete
	ignore  bool        // the branch has an ignore_value or ignore_lease put
}

func (s *txnScope) deleted(k string) bool {
	for _, d := range s.dels {
		if d[0] <= k && k < d[1] {
			return true
		}
	}
	return false
}

// txn is a random txn: compares that may hold or not, each branch a few
// operations of every kind, nested txns up to depth.
func (g *gen) txn(depth int, readOnly bool) *pb.TxnRequest {
	t := &pb.TxnRequest{}
	for range g.rng.IntN(4) {
		t.Compare = append(t.Compare, g.compare())
	}
	t.Success = g.branch(&txnScope{puts: map[string]bool{}}, depth, readOnly)
	t.Failure = g.branch(&txnScope{puts: map[string]bool{}}, depth, readOnly)
	return t
}

func (g *gen) branch(s *txnScope, depth int, readOnly bool) []*pb.RequestOp {
	var ops []*pb.RequestOp
	for range g.rng.IntN(4) {
		kind := g.rng.IntN(10)
		if readOnly {
			kind = 0
		}
		switch {
		case kind < 3:
			ops = append(ops, &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: g.txnRange()}})
		case kind < 7:
			if p := g.txnPut(s); p != nil {
				ops = append(ops, &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: p}})
			}
		case kind < 9:
			if d := g.txnDelete(s); d != nil {
				ops = append(ops, &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: d}})
			}
		case depth > 0:
			n := &pb.TxnRequest{}
			for range g.rng.IntN(3) {
				n.Compare = append(n.Compare, g.compare())
			}
			n.Success = g.branch(s, depth-1, false)
			n.Failure = g.branch(s, depth-1, false)
			ops = append(ops, &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: n}})
		}
	}
	return ops
}

// txnRange is a read inside a txn: mostly at the txn's own state, else at
// a revision the Store holds, now and then at one it does not (which makes
// the whole txn fail).
func (g *gen) txnRange() *pb.RangeRequest {
	rev := int64(0)
	switch x := g.rng.Float64(); {
	case x < 0.02:
		rev = -1
	case x < 0.03:
		rev = g.m.current + 1
	case x < 0.06 && g.m.compacted > 1:
		rev = g.m.compacted - 1
	case x < 0.4:
		rev = g.readRev()
	}
	return g.rangeReq(rev)
}

func (g *gen) txnPut(s *txnScope) *pb.PutRequest {
	p := g.put(!s.fromKey)
	k := string(p.Key)
	if s.puts[k] || s.deleted(k) {
		return nil
	}
	s.puts[k] = true
	s.ignore = s.ignore || p.IgnoreValue || p.IgnoreLease
	return p
}

func (g *gen) txnDelete(s *txnScope) *pb.DeleteRangeRequest {
	d := g.deleteRange()
	if len(d.RangeEnd) == 1 && d.RangeEnd[0] == 0 {
		if s.ignore {
			return nil
		}
		s.fromKey = true
		return d
	}
	iv := [2]string{string(d.Key), string(d.RangeEnd)}
	if len(d.RangeEnd) == 0 {
		iv[1] = string(d.Key) + "\x00"
	}
	for k := range s.puts {
		if iv[0] <= k && k < iv[1] {
			return nil
		}
	}
	s.dels = append(s.dels, iv)
	return d
}

// compaction is mostly a valid one somewhere between the compacted and the
// current revision; now and then one etcd refuses.
func (g *gen) compaction() *pb.CompactionRequest {
	m := g.m
	c := &pb.CompactionRequest{Physical: g.chance(0.3)}
	switch x := g.rng.Float64(); {
	case x < 0.12 && m.compacted > 0:
		c.Revision = max(1, m.compacted-g.rng.Int64N(2))
	case x < 0.2:
		c.Revision = m.current + 1 + g.rng.Int64N(3)
	case m.current > m.compacted:
		c.Revision = m.compacted + 1 + g.rng.Int64N(m.current-m.compacted)
	default:
		c.Revision = m.current + 1
	}
	return c
}

// grant names a lease ID from the pool (which may exist already) or leaves
// the choice to the Store. TTLs are long: a lease must not expire on its
// own during a run, which the model does not foresee.
func (g *gen) grant() *pb.LeaseGrantRequest {
	r := &pb.LeaseGrantRequest{TTL: pick(g, []int64{600, 3600, 86400})}
	if g.chance(0.6) {
		r.ID = pick(g, g.leasePool)
	}
	if g.chance(0.03) {
		r.TTL = mvcc.MaxLeaseTTL + 1
	}
	return r
}

func (g *gen) revoke() *pb.LeaseRevokeRequest {
	if id := g.liveLease(); id != 0 && g.chance(0.85) {
		return &pb.LeaseRevokeRequest{ID: id}
	}
	return &pb.LeaseRevokeRequest{ID: pick(g, g.leasePool)}
}

// independentWrites are writes no two of which touch the same key and none
// of which can fail, so that sent at once they may commit in any order
// (and share a batch): the revisions of the answers tell the model the
// order.
func (g *gen) independentWrites() []proto.Message {
	used := map[string]bool{}
	var reqs []proto.Message
	for range 2 + g.rng.IntN(6) {
		k := g.key()
		if used[string(k)] {
			continue
		}
		used[string(k)] = true
		if kv := g.m.live()[string(k)]; kv != nil && g.chance(0.3) {
			reqs = append(reqs, &pb.DeleteRangeRequest{Key: k, PrevKv: g.chance(0.5)})
			continue
		}
		p := &pb.PutRequest{Key: k, Value: g.value(), PrevKv: g.chance(0.5)}
		if g.chance(0.3) {
			p.Lease = g.liveLease()
		}
		reqs = append(reqs, p)
	}
	return reqs
}
