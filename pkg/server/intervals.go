package server

import (
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// keyInterval is a deleted key range [begin, end). An empty end means "up to
// infinity", as in etcd's string-affine intervals; a single key is
// [key, key+"\x00"). Note what follows from comparing end as a plain string:
// a delete with range_end "\x00" ("every key >= key") covers no key here,
// exactly as in etcd, so etcd and kite accept and reject the same txns.
type keyInterval struct {
	begin, end string
}

func (iv keyInterval) contains(k string) bool {
	return iv.begin <= k && (iv.end == "" || k < iv.end)
}

// deleteSet is the list of ranges deleted by one txn level and its children.
// A plain slice is enough: the op count is bounded by MaxTxnOps before this
// check runs.
type deleteSet []keyInterval

func (d deleteSet) contains(k string) bool {
	for _, iv := range d {
		if iv.contains(k) {
			return true
		}
	}
	return false
}

// checkIntervals rejects a list of ops in which a key is put twice, or put
// and deleted, including through nested txns (etcd's checkIntervals). The
// success and failure branches of one nested txn are exclusive, so a key
// put in both is fine. It returns the keys put and the ranges deleted, for
// the level above.
func checkIntervals(reqs []*pb.RequestOp) (map[string]struct{}, deleteSet, error) {
	var dels deleteSet
	// Deletes of this level first, so that puts below can be checked
	// against them.
	for _, req := range reqs {
		tv, ok := req.GetRequest().(*pb.RequestOp_RequestDeleteRange)
		if !ok || tv.RequestDeleteRange == nil {
			continue
		}
		key, end := string(tv.RequestDeleteRange.Key), string(tv.RequestDeleteRange.RangeEnd)
		if end == "" {
			end = key + "\x00"
		}
		dels = append(dels, keyInterval{begin: key, end: end})
	}

	puts := make(map[string]struct{})
	for _, req := range reqs {
		tv, ok := req.GetRequest().(*pb.RequestOp_RequestTxn)
		if !ok {
			continue
		}
		putsThen, delsThen, err := checkIntervals(tv.RequestTxn.GetSuccess())
		if err != nil {
			return nil, dels, err
		}
		putsElse, delsElse, err := checkIntervals(tv.RequestTxn.GetFailure())
		if err != nil {
			return nil, dels, err
		}
		for k := range putsThen {
			if _, ok := puts[k]; ok || dels.contains(k) {
				return nil, dels, rpctypes.ErrGRPCDuplicateKey
			}
			puts[k] = struct{}{}
		}
		for k := range putsElse {
			if _, ok := puts[k]; ok {
				if _, fromThen := putsThen[k]; !fromThen {
					return nil, dels, rpctypes.ErrGRPCDuplicateKey
				}
			}
			if dels.contains(k) {
				return nil, dels, rpctypes.ErrGRPCDuplicateKey
			}
			puts[k] = struct{}{}
		}
		dels = append(dels, delsThen...)
		dels = append(dels, delsElse...)
	}

	for _, req := range reqs {
		tv, ok := req.GetRequest().(*pb.RequestOp_RequestPut)
		if !ok || tv.RequestPut == nil {
			continue
		}
		k := string(tv.RequestPut.Key)
		if _, ok := puts[k]; ok || dels.contains(k) {
			return nil, dels, rpctypes.ErrGRPCDuplicateKey
		}
		puts[k] = struct{}{}
	}
	return puts, dels, nil
}
