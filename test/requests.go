package test

import (
	"strings"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Short constructors for the request tables.

func bs(s string) []byte {
	if s == "" {
		return nil
	}
	return []byte(s)
}

func prefixEnd(p string) string { return string(clientv3.GetPrefixRangeEnd(p)) }

func put(k, v string) *pb.PutRequest { return &pb.PutRequest{Key: bs(k), Value: bs(v)} }

func putLease(k, v string, lease int64) *pb.PutRequest {
	return &pb.PutRequest{Key: bs(k), Value: bs(v), Lease: lease}
}

func rng(k, end string) *pb.RangeRequest { return &pb.RangeRequest{Key: bs(k), RangeEnd: bs(end)} }

func all() *pb.RangeRequest { return rng("\x00", "\x00") }

func del(k, end string) *pb.DeleteRangeRequest {
	return &pb.DeleteRangeRequest{Key: bs(k), RangeEnd: bs(end)}
}

func bigValue(n int, c byte) string { return strings.Repeat(string(c), n) }

func cmpr(key string, target pb.Compare_CompareTarget, res pb.Compare_CompareResult, v any) *pb.Compare {
	c := &pb.Compare{Key: bs(key), Target: target, Result: res}
	switch target {
	case pb.Compare_VALUE:
		c.TargetUnion = &pb.Compare_Value{Value: bs(v.(string))}
	case pb.Compare_VERSION:
		c.TargetUnion = &pb.Compare_Version{Version: int64(v.(int))}
	case pb.Compare_CREATE:
		c.TargetUnion = &pb.Compare_CreateRevision{CreateRevision: int64(v.(int))}
	case pb.Compare_MOD:
		c.TargetUnion = &pb.Compare_ModRevision{ModRevision: int64(v.(int))}
	case pb.Compare_LEASE:
		c.TargetUnion = &pb.Compare_Lease{Lease: int64(v.(int))}
	}
	return c
}

func cmprRange(key, end string, target pb.Compare_CompareTarget, res pb.Compare_CompareResult, v any) *pb.Compare {
	c := cmpr(key, target, res, v)
	c.RangeEnd = bs(end)
	return c
}

func opPut(r *pb.PutRequest) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: r}}
}

func opRange(r *pb.RangeRequest) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: r}}
}

func opDel(r *pb.DeleteRangeRequest) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: r}}
}

func opTxn(r *pb.TxnRequest) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: r}}
}

func txn(cmps []*pb.Compare, success, failure []*pb.RequestOp) *pb.TxnRequest {
	return &pb.TxnRequest{Compare: cmps, Success: success, Failure: failure}
}

func ops(o ...*pb.RequestOp) []*pb.RequestOp { return o }

func cmps(c ...*pb.Compare) []*pb.Compare { return c }
