package storetest

import (
	"bytes"
	"math"
	"sort"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// evalRange answers r over the key space st (already the one of the
// revision r reads) with header revision header, as etcd 3.7's
// txn.executeRange does (server/etcdserver/txn/range.go):
//
//   - Count is the number of keys in the range, before the revision
//     filters and the limit (etcd counts while it walks its index);
//   - with no revision filter and an order that is "none" or ascending
//     keys, etcd reads only the first limit+1 keys of the range, in key
//     order, and sorts those: a sort target with order "none" (which then
//     means ascending) sorts only them, not the whole range;
//   - otherwise the filters apply to every key of the range, then the
//     sort, then the limit; More says the limit cut keys off, filtered
//     ones not counted;
//   - a count_only answer has no keys and never More;
//   - keys_only drops values; unless the sort is by value (which needs
//     them) etcd serves it from its index alone, whose rows carry no lease
//     either, so those answers have Lease 0.
func (m *model) evalRange(r *pb.RangeRequest, st map[string]*mvccpb.KeyValue, header int64) *pb.RangeResponse {
	keys := keysIn(st, r.Key, r.RangeEnd)
	resp := &pb.RangeResponse{Header: hdr(header), Count: int64(len(keys))}
	if r.CountOnly {
		return resp
	}
	if n := fetchLimit(r); n > 0 && int64(len(keys)) > n {
		keys = keys[:n]
	}
	var kvs []*mvccpb.KeyValue
	for _, k := range keys {
		if kv := st[k]; passesFilters(r, kv) {
			kvs = append(kvs, cloneKV(kv))
		}
	}
	sortLikeEtcd(kvs, r)
	if r.Limit > 0 && int64(len(kvs)) > r.Limit {
		kvs, resp.More = kvs[:r.Limit], true
	}
	if r.KeysOnly {
		for _, kv := range kvs {
			kv.Value = nil
			if r.SortTarget != pb.RangeRequest_VALUE {
				kv.Lease = 0
			}
		}
	}
	resp.Kvs = kvs
	return resp
}

// fetchLimit is how many keys etcd reads from its index (rangeLimit): the
// limit plus one, to know whether there are more, when neither a sort nor
// a filter needs the whole range; 0 for all of them.
func fetchLimit(r *pb.RangeRequest) int64 {
	natural := r.SortOrder == pb.RangeRequest_NONE ||
		r.SortTarget == pb.RangeRequest_KEY && r.SortOrder == pb.RangeRequest_ASCEND
	filtered := r.MinModRevision != 0 || r.MaxModRevision != 0 || r.MinCreateRevision != 0 || r.MaxCreateRevision != 0
	if !natural || filtered || r.Limit <= 0 || r.Limit == math.MaxInt64 {
		return 0
	}
	return r.Limit + 1
}

func passesFilters(r *pb.RangeRequest, kv *mvccpb.KeyValue) bool {
	switch {
	case r.MaxModRevision != 0 && kv.ModRevision > r.MaxModRevision:
	case r.MinModRevision != 0 && kv.ModRevision < r.MinModRevision:
	case r.MaxCreateRevision != 0 && kv.CreateRevision > r.MaxCreateRevision:
	case r.MinCreateRevision != 0 && kv.CreateRevision < r.MinCreateRevision:
	default:
		return true
	}
	return false
}

// sortLikeEtcd sorts as etcd does: no order with a target other than the
// key means ascending; the natural key order is left alone. etcd sorts
// with sort.Sort, which is not stable, so keys that tie on the target come
// out in the order that algorithm leaves them in from key-ordered input;
// the same algorithm with the same comparison reproduces it exactly.
func sortLikeEtcd(kvs []*mvccpb.KeyValue, r *pb.RangeRequest) {
	order := r.SortOrder
	if r.SortTarget != pb.RangeRequest_KEY && order == pb.RangeRequest_NONE {
		order = pb.RangeRequest_ASCEND
	}
	if order == pb.RangeRequest_NONE || r.SortTarget == pb.RangeRequest_KEY && order == pb.RangeRequest_ASCEND {
		return
	}
	s := byTarget{kvs: kvs, target: r.SortTarget}
	switch order {
	case pb.RangeRequest_ASCEND:
		sort.Sort(s)
	case pb.RangeRequest_DESCEND:
		sort.Sort(sort.Reverse(s))
	}
}

type byTarget struct {
	kvs    []*mvccpb.KeyValue
	target pb.RangeRequest_SortTarget
}

func (s byTarget) Len() int      { return len(s.kvs) }
func (s byTarget) Swap(i, j int) { s.kvs[i], s.kvs[j] = s.kvs[j], s.kvs[i] }

func (s byTarget) Less(i, j int) bool {
	a, b := s.kvs[i], s.kvs[j]
	switch s.target {
	case pb.RangeRequest_VERSION:
		return a.Version < b.Version
	case pb.RangeRequest_CREATE:
		return a.CreateRevision < b.CreateRevision
	case pb.RangeRequest_MOD:
		return a.ModRevision < b.ModRevision
	case pb.RangeRequest_VALUE:
		return bytes.Compare(a.Value, b.Value) < 0
	}
	return bytes.Compare(a.Key, b.Key) < 0
}
