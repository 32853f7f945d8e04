package mvcc

import (
	"bytes"
	"context"
	"math"
	"sort"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// rangeEnd converts a request's range_end to the Backend's convention. Both
// use etcd's: empty selects the key alone, "\x00" every key >= key.
func rangeEnd(end []byte) []byte {
	if len(end) == 0 {
		return nil
	}
	return end
}

// KeyAfter returns the smallest key greater than key, key+"\x00": where
// the next page of a list whose last key was key starts.
func KeyAfter(key []byte) []byte {
	return append(append(make([]byte, 0, len(key)+1), key...), 0)
}

// checkRevision applies etcd's rules for a requested read revision against
// the current and compacted revisions of a snapshot. 0 means current.
func checkRevision(rev, current, compacted int64) (int64, error) {
	switch {
	case rev > current:
		return 0, ErrFutureRev
	case rev <= 0:
		return current, nil
	case rev < compacted:
		return 0, ErrCompacted
	}
	return rev, nil
}

// rangeReader is the part of a ReadTx that executeRange uses: a latest get
// serves it from one row (getlatest.go), everything else from a ReadTx.
type rangeReader interface {
	Range(ctx context.Context, key, end []byte, rev, limit int64, keysOnly bool) ([]*mvccpb.KeyValue, error)
	Count(ctx context.Context, key, end []byte, rev int64) (int64, error)
}

// executeRange answers r from tx, whose current and compacted revisions are
// given. It follows etcd's order: fetch (limit+1 when the natural key order
// and no filters allow pushing the limit down), filter, sort, truncate.
// Count is the number of keys in the range at the read revision, before
// filters, as in etcd; withCount false skips the count query a limited
// read would need (Count is then only set when the rows were the whole range).
func executeRange(ctx context.Context, tx rangeReader, r *pb.RangeRequest, current, compacted int64, withCount bool) (*pb.RangeResponse, error) {
	rev, err := checkRevision(r.Revision, current, compacted)
	if err != nil {
		return nil, err
	}
	end := rangeEnd(r.RangeEnd)
	resp := &pb.RangeResponse{Header: &pb.ResponseHeader{Revision: current}}

	if r.CountOnly {
		if resp.Count, err = tx.Count(ctx, r.Key, end, rev); err != nil {
			return nil, err
		}
		return resp, nil
	}

	limit := r.Limit
	if !defaultOrdering(r.SortTarget, r.SortOrder) || hasRevisionFilters(r) {
		limit = 0
	}
	if limit > 0 && limit < math.MaxInt64 {
		limit++
	}
	keysOnly := r.KeysOnly && r.SortTarget != pb.RangeRequest_VALUE
	kvs, err := tx.Range(ctx, r.Key, end, rev, limit, keysOnly)
	if err != nil {
		return nil, err
	}
	// The fetched rows are the whole range unless the limit cut them short;
	// only then does the total need a count of its own.
	switch {
	case limit > 0 && int64(len(kvs)) == limit && withCount:
		if resp.Count, err = tx.Count(ctx, r.Key, end, rev); err != nil {
			return nil, err
		}
	case limit <= 0 || int64(len(kvs)) < limit:
		resp.Count = int64(len(kvs))
	}
	kvs = filterKVs(kvs, r)
	sortKVs(kvs, r)
	if r.Limit > 0 && int64(len(kvs)) > r.Limit {
		kvs = kvs[:r.Limit]
		resp.More = true
	}
	if r.KeysOnly {
		// etcd answers a keys_only range not sorted by value from its key
		// index, which holds no lease: every key comes back with lease 0.
		noLease := r.SortTarget != pb.RangeRequest_VALUE
		for _, kv := range kvs {
			kv.Value = nil
			if noLease {
				kv.Lease = 0
			}
		}
	}
	resp.Kvs = kvs
	return resp, nil
}

func defaultOrdering(target pb.RangeRequest_SortTarget, order pb.RangeRequest_SortOrder) bool {
	return order == pb.RangeRequest_NONE ||
		(target == pb.RangeRequest_KEY && order == pb.RangeRequest_ASCEND)
}

func hasRevisionFilters(r *pb.RangeRequest) bool {
	return r.MinModRevision != 0 || r.MaxModRevision != 0 ||
		r.MinCreateRevision != 0 || r.MaxCreateRevision != 0
}

func filterKVs(kvs []*mvccpb.KeyValue, r *pb.RangeRequest) []*mvccpb.KeyValue {
	if !hasRevisionFilters(r) {
		return kvs
	}
	out := kvs[:0]
	for _, kv := range kvs {
		switch {
		case r.MaxModRevision != 0 && kv.ModRevision > r.MaxModRevision:
		case r.MinModRevision != 0 && kv.ModRevision < r.MinModRevision:
		case r.MaxCreateRevision != 0 && kv.CreateRevision > r.MaxCreateRevision:
		case r.MinCreateRevision != 0 && kv.CreateRevision < r.MinCreateRevision:
		default:
			out = append(out, kv)
		}
	}
	return out
}

// sortKVs sorts as etcd does: a non-key target with no order means
// ascending. etcd uses sort.Sort (not stable), so kite uses the same algorithm
// on the same key-ordered input to produce the same order among ties.
func sortKVs(kvs []*mvccpb.KeyValue, r *pb.RangeRequest) {
	order := r.SortOrder
	if r.SortTarget != pb.RangeRequest_KEY && order == pb.RangeRequest_NONE {
		order = pb.RangeRequest_ASCEND
	}
	if defaultOrdering(r.SortTarget, order) {
		return
	}
	s := kvSorter{kvs: kvs}
	switch r.SortTarget {
	case pb.RangeRequest_KEY:
		s.less = func(a, b *mvccpb.KeyValue) bool { return bytes.Compare(a.Key, b.Key) < 0 }
	case pb.RangeRequest_VERSION:
		s.less = func(a, b *mvccpb.KeyValue) bool { return a.Version < b.Version }
	case pb.RangeRequest_CREATE:
		s.less = func(a, b *mvccpb.KeyValue) bool { return a.CreateRevision < b.CreateRevision }
	case pb.RangeRequest_MOD:
		s.less = func(a, b *mvccpb.KeyValue) bool { return a.ModRevision < b.ModRevision }
	case pb.RangeRequest_VALUE:
		s.less = func(a, b *mvccpb.KeyValue) bool { return bytes.Compare(a.Value, b.Value) < 0 }
	default:
		return
	}
	if order == pb.RangeRequest_DESCEND {
		sort.Sort(sort.Reverse(s))
		return
	}
	sort.Sort(s)
}

type kvSorter struct {
	kvs  []*mvccpb.KeyValue
	less func(a, b *mvccpb.KeyValue) bool
}

func (s kvSorter) Len() int           { return len(s.kvs) }
func (s kvSorter) Swap(i, j int)      { s.kvs[i], s.kvs[j] = s.kvs[j], s.kvs[i] }
func (s kvSorter) Less(i, j int) bool { return s.less(s.kvs[i], s.kvs[j]) }
