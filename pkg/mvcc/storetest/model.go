package storetest

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strings"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"

	"github.com/kite-db/kite/pkg/mvcc"
)

// minLeaseTTL is the smallest TTL the Store grants with mvcc.Config's
// default (etcd raises shorter TTLs to its minimum the same way).
const minLeaseTTL = 2

// model is etcd's key-value semantics written the plainest way there is:
// the whole key space of every revision is kept, so a read at any revision
// is a look-up, and nothing has to be clever to be right. It knows nothing
// of the Store; it is what the Store is compared with.
type model struct {
	current, compacted int64
	// states[rev] is the key space at revision rev, never changed once
	// appended. A store starts at revision 1, empty; states[0] is unused.
	states []map[string]*mvccpb.KeyValue
	// changes[rev] are the changes of revision rev in sub-revision order.
	changes [][]change
	// leases maps each live lease to its granted TTL; granted lists them
	// in the order they were granted.
	leases  map[int64]int64
	granted []int64
}

// change is one row of the revision log.
type change struct {
	deleted bool
	// kv is the row: the whole key-value of a put, only Key and ModRevision
	// of a delete (what etcd's DELETE event carries).
	kv *mvccpb.KeyValue
}

func newModel() *model {
	return &model{
		current: 1,
		states:  []map[string]*mvccpb.KeyValue{nil, {}},
		changes: [][]change{nil, nil},
		leases:  map[int64]int64{},
	}
}

func (m *model) live() map[string]*mvccpb.KeyValue { return m.states[m.current] }

func hdr(rev int64) *pb.ResponseHeader { return &pb.ResponseHeader{Revision: rev} }

func cloneKV(kv *mvccpb.KeyValue) *mvccpb.KeyValue {
	if kv == nil {
		return nil
	}
	return proto.Clone(kv).(*mvccpb.KeyValue)
}

// inRange follows etcd's range_end: empty selects key alone, "\x00" every
// key >= key, anything else [key, end).
func inRange(k string, key, end []byte) bool {
	switch {
	case len(end) == 0:
		return k == string(key)
	case len(end) == 1 && end[0] == 0:
		return k >= string(key)
	}
	return string(key) <= k && k < string(end)
}

// keysIn returns the keys of st in [key, end), in ascending order.
func keysIn(st map[string]*mvccpb.KeyValue, key, end []byte) []string {
	var ks []string
	for k := range st {
		if inRange(k, key, end) {
			ks = append(ks, k)
		}
	}
	slices.Sort(ks)
	return ks
}

// leaseKeys returns the live keys attached to lease id, in ascending order.
func (m *model) leaseKeys(id int64) []string {
	var ks []string
	for k, kv := range m.live() {
		if kv.Lease == id {
			ks = append(ks, k)
		}
	}
	slices.Sort(ks)
	return ks
}

// readRevision resolves the revision of a Range as etcd's rangeKeys does.
func (m *model) readRevision(rev int64) (int64, error) {
	switch {
	case rev > m.current:
		return 0, mvcc.ErrFutureRev
	case rev <= 0:
		return m.current, nil
	case rev < m.compacted:
		return 0, mvcc.ErrCompacted
	}
	return rev, nil
}

// apply predicts the answer to a write request and, if it succeeds, makes
// its revision. assignedLease is the ID the Store chose for a LeaseGrant
// that left it to the server.
func (m *model) apply(req proto.Message, assignedLease int64) (proto.Message, error) {
	switch r := req.(type) {
	case *pb.PutRequest:
		return m.put(r)
	case *pb.DeleteRangeRequest:
		return m.deleteRange(r)
	case *pb.TxnRequest:
		return m.txn(r)
	case *pb.CompactionRequest:
		return m.compact(r)
	case *pb.LeaseGrantRequest:
		return m.grant(r, assignedLease)
	case *pb.LeaseRevokeRequest:
		return m.revoke(r)
	case *pb.RangeRequest:
		return m.rangeAt(r)
	}
	panic(fmt.Sprintf("storetest: model cannot apply %T", req))
}

// write is one revision in the making: the key space as the request's own
// operations leave it (a txn reads its own writes) and the changes so far.
type write struct {
	m       *model
	live    map[string]*mvccpb.KeyValue
	copied  bool
	changes []change
}

func (m *model) begin() *write { return &write{m: m, live: m.live()} }

func (w *write) rev() int64 { return w.m.current + 1 }

// readRev is the revision a request's answers carry: the new one once it
// has changed something, as in etcd, else the current one.
func (w *write) readRev() int64 {
	if len(w.changes) > 0 {
		return w.m.current + 1
	}
	return w.m.current
}

func (w *write) put(key string, value []byte, lease int64) {
	if !w.copied {
		w.live, w.copied = maps.Clone(w.live), true
	}
	rev := w.rev()
	kv := &mvccpb.KeyValue{Key: []byte(key), Value: bytes.Clone(value), Lease: lease,
		CreateRevision: rev, ModRevision: rev, Version: 1}
	if prev := w.live[key]; prev != nil {
		kv.CreateRevision, kv.Version = prev.CreateRevision, prev.Version+1
	}
	w.changes = append(w.changes, change{kv: kv})
	w.live[key] = kv
}

func (w *write) del(key string) {
	if !w.copied {
		w.live, w.copied = maps.Clone(w.live), true
	}
	w.changes = append(w.changes, change{deleted: true, kv: &mvccpb.KeyValue{Key: []byte(key), ModRevision: w.rev()}})
	delete(w.live, key)
}

// commit makes the revision, if the request changed anything: etcd makes
// none for a request that changes nothing.
func (w *write) commit() {
	if len(w.changes) == 0 {
		return
	}
	w.m.current++
	w.m.states = append(w.m.states, w.live)
	w.m.changes = append(w.m.changes, w.changes)
}

// checkPut is etcd's check of a put against the state before the request
// (a txn checks every put before it executes any): the lease first, then
// the key that ignore_value and ignore_lease need.
func (m *model) checkPut(p *pb.PutRequest, before map[string]*mvccpb.KeyValue) error {
	if p.Lease != 0 {
		if _, ok := m.leases[p.Lease]; !ok {
			return mvcc.ErrLeaseNotFound
		}
	}
	if (p.IgnoreValue || p.IgnoreLease) && before[string(p.Key)] == nil {
		return mvcc.ErrKeyNotFound
	}
	return nil
}

func (w *write) putReq(p *pb.PutRequest) *pb.PutResponse {
	key := string(p.Key)
	prev := w.live[key]
	value, lease := p.Value, p.Lease
	if p.IgnoreValue {
		value = prev.Value
	}
	if p.IgnoreLease {
		lease = prev.Lease
	}
	w.put(key, value, lease)
	resp := &pb.PutResponse{Header: hdr(w.rev())}
	if p.PrevKv {
		resp.PrevKv = cloneKV(prev)
	}
	return resp
}

func (w *write) deleteReq(d *pb.DeleteRangeRequest) *pb.DeleteRangeResponse {
	keys := keysIn(w.live, d.Key, d.RangeEnd)
	resp := &pb.DeleteRangeResponse{Deleted: int64(len(keys))}
	if d.PrevKv {
		for _, k := range keys {
			resp.PrevKvs = append(resp.PrevKvs, cloneKV(w.live[k]))
		}
	}
	for _, k := range keys {
		w.del(k)
	}
	resp.Header = hdr(w.readRev())
	return resp
}

// rangeReq answers a Range inside a txn: at its revision if it names one,
// else at the txn's own state, its writes so far included.
func (w *write) rangeReq(r *pb.RangeRequest) *pb.RangeResponse {
	st := w.live
	if r.Revision > 0 {
		st = w.m.states[r.Revision]
	}
	return w.m.evalRange(r, st, w.readRev())
}

func (m *model) put(p *pb.PutRequest) (*pb.PutResponse, error) {
	if err := m.checkPut(p, m.live()); err != nil {
		return nil, err
	}
	w := m.begin()
	resp := w.putReq(p)
	w.commit()
	return resp, nil
}

func (m *model) deleteRange(d *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	w := m.begin()
	resp := w.deleteReq(d)
	w.commit()
	return resp, nil
}

func (m *model) rangeAt(r *pb.RangeRequest) (*pb.RangeResponse, error) {
	rev, err := m.readRevision(r.Revision)
	if err != nil {
		return nil, err
	}
	return m.evalRange(r, m.states[rev], m.current), nil
}

func (m *model) compact(c *pb.CompactionRequest) (*pb.CompactionResponse, error) {
	switch {
	case c.Revision <= m.compacted:
		return nil, mvcc.ErrCompacted
	case c.Revision > m.current:
		return nil, mvcc.ErrFutureRev
	}
	m.compacted = c.Revision
	return &pb.CompactionResponse{Header: hdr(m.current)}, nil
}

func (m *model) grant(g *pb.LeaseGrantRequest, assigned int64) (*pb.LeaseGrantResponse, error) {
	if g.TTL > mvcc.MaxLeaseTTL {
		return nil, mvcc.ErrLeaseTTLTooLarge
	}
	id := g.ID
	if id == 0 {
		id = assigned
	}
	if _, ok := m.leases[id]; ok {
		return nil, mvcc.ErrLeaseExists
	}
	ttl := max(g.TTL, minLeaseTTL)
	m.leases[id] = ttl
	m.granted = append(m.granted, id)
	return &pb.LeaseGrantResponse{Header: hdr(m.current), ID: id, TTL: ttl}, nil
}

// revoke deletes the lease's keys in key order in one revision, as etcd's
// lessor does, then the lease.
func (m *model) revoke(r *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	if _, ok := m.leases[r.ID]; !ok {
		return nil, mvcc.ErrLeaseNotFound
	}
	w := m.begin()
	for _, k := range m.leaseKeys(r.ID) {
		w.del(k)
	}
	delete(m.leases, r.ID)
	m.granted = slices.DeleteFunc(m.granted, func(id int64) bool { return id == r.ID })
	resp := &pb.LeaseRevokeResponse{Header: hdr(w.readRev())}
	w.commit()
	return resp, nil
}

// events is what a watcher of [key, end) from revision start receives up
// to the current revision. As etcd's server does (v3rpc's sendLoop),
// prev_kv is read as the key's value at the revision before the event: it
// is left out when that revision is compacted, and never asked for a put
// that creates its key (create revision = mod revision), even one that
// recreates in the same txn a key a from-key delete removed.
func (m *model) events(req *pb.WatchCreateRequest) []*mvccpb.Event {
	key := req.Key
	if len(key) == 0 {
		key = []byte{0}
	}
	noPut := slices.Contains(req.Filters, pb.WatchCreateRequest_NOPUT)
	noDelete := slices.Contains(req.Filters, pb.WatchCreateRequest_NODELETE)
	var evs []*mvccpb.Event
	for rev := max(req.StartRevision, 1); rev <= m.current; rev++ {
		for _, c := range m.changes[rev] {
			if !inRange(string(c.kv.Key), key, req.RangeEnd) || c.deleted && noDelete || !c.deleted && noPut {
				continue
			}
			ev := &mvccpb.Event{Type: mvccpb.Event_PUT, Kv: cloneKV(c.kv)}
			if c.deleted {
				ev.Type = mvccpb.Event_DELETE
			}
			create := !c.deleted && c.kv.CreateRevision == c.kv.ModRevision
			switch {
			case !req.PrevKv || create || rev-1 < m.compacted:
			default:
				ev.PrevKv = cloneKV(m.states[rev-1][string(c.kv.Key)])
			}
			evs = append(evs, ev)
		}
	}
	return evs
}

// kept describes the rows etcd's HashKV hashes at revision rev after a
// compaction at compacted, in the order it hashes them (its bucket's, by
// revision): every row above the compacted revision, and at or below it
// only each key's newest row, and only if that row is not a tombstone.
// Two equal descriptions must hash alike.
func (m *model) kept(rev, compacted int64) string {
	type pos struct{ rev, sub int }
	alive := map[string]pos{}
	for r := int64(1); r <= compacted; r++ {
		for s, c := range m.changes[r] {
			if c.deleted {
				delete(alive, string(c.kv.Key))
			} else {
				alive[string(c.kv.Key)] = pos{int(r), s}
			}
		}
	}
	var b strings.Builder
	for r := int64(1); r <= rev; r++ {
		for s, c := range m.changes[r] {
			if r <= compacted && alive[string(c.kv.Key)] != (pos{int(r), s}) {
				continue
			}
			kv := c.kv
			fmt.Fprintf(&b, "%d.%d %v %q=%q c%d m%d v%d l%d|", r, s, c.deleted, kv.Key, kv.Value,
				kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease)
		}
	}
	return b.String()
}
