package server

import (
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Request checks, in the same order and with the same errors as etcd's v3rpc
// (key.go). They run before a request reaches the store, so a client gets
// exactly etcd's answer for a malformed request. All of them accept nil
// messages (treated as empty) so that no input can make them panic.

func checkRangeRequest(r *pb.RangeRequest) error {
	if len(r.GetKey()) == 0 {
		return rpctypes.ErrGRPCEmptyKey
	}
	if _, ok := pb.RangeRequest_SortOrder_name[int32(r.GetSortOrder())]; !ok {
		return rpctypes.ErrGRPCInvalidSortOption
	}
	if _, ok := pb.RangeRequest_SortTarget_name[int32(r.GetSortTarget())]; !ok {
		return rpctypes.ErrGRPCInvalidSortOption
	}
	return nil
}

// checkRangeStreamRequest adds RangeStream's limits: the stream walks keys
// in ascending order chunk by chunk, so it cannot sort by anything else or
// filter by revision (those would break the resume key). etcd answers
// Unimplemented, which makes clients fall back to paged Range.
func checkRangeStreamRequest(r *pb.RangeRequest) error {
	if err := checkRangeRequest(r); err != nil {
		return err
	}
	if !isDefaultOrdering(r.GetSortTarget(), r.GetSortOrder()) {
		return status.Errorf(codes.Unimplemented, "RangeStream does not support custom sort orders")
	}
	if r.GetMinModRevision() != 0 || r.GetMaxModRevision() != 0 ||
		r.GetMinCreateRevision() != 0 || r.GetMaxCreateRevision() != 0 {
		return status.Errorf(codes.Unimplemented, "RangeStream does not support revision filters")
	}
	return nil
}

// isDefaultOrdering reports whether the sort asked for is the natural
// ascending key order.
func isDefaultOrdering(target pb.RangeRequest_SortTarget, order pb.RangeRequest_SortOrder) bool {
	return order == pb.RangeRequest_NONE ||
		(target == pb.RangeRequest_KEY && order == pb.RangeRequest_ASCEND)
}

func checkPutRequest(r *pb.PutRequest) error {
	if len(r.GetKey()) == 0 {
		return rpctypes.ErrGRPCEmptyKey
	}
	if r.GetIgnoreValue() && len(r.GetValue()) != 0 {
		return rpctypes.ErrGRPCValueProvided
	}
	if r.GetIgnoreLease() && r.GetLease() != 0 {
		return rpctypes.ErrGRPCLeaseProvided
	}
	return nil
}

func checkDeleteRequest(r *pb.DeleteRangeRequest) error {
	if len(r.GetKey()) == 0 {
		return rpctypes.ErrGRPCEmptyKey
	}
	return nil
}

// checkTxnRequest bounds the widest of compare/success/failure by maxTxnOps
// and checks every op; a nested txn gets the budget left over by its parent,
// which is what keeps deep nesting from multiplying the work.
func checkTxnRequest(r *pb.TxnRequest, maxTxnOps int) error {
	opc := max(len(r.GetCompare()), len(r.GetSuccess()), len(r.GetFailure()))
	if opc > maxTxnOps {
		return rpctypes.ErrGRPCTooManyOps
	}
	for _, c := range r.GetCompare() {
		if len(c.GetKey()) == 0 {
			return rpctypes.ErrGRPCEmptyKey
		}
	}
	for _, u := range r.GetSuccess() {
		if err := checkRequestOp(u, maxTxnOps-opc); err != nil {
			return err
		}
	}
	for _, u := range r.GetFailure() {
		if err := checkRequestOp(u, maxTxnOps-opc); err != nil {
			return err
		}
	}
	return nil
}

func checkRequestOp(u *pb.RequestOp, maxTxnOps int) error {
	switch uv := u.GetRequest().(type) {
	case *pb.RequestOp_RequestRange:
		return checkRangeRequest(uv.RequestRange)
	case *pb.RequestOp_RequestPut:
		return checkPutRequest(uv.RequestPut)
	case *pb.RequestOp_RequestDeleteRange:
		return checkDeleteRequest(uv.RequestDeleteRange)
	case *pb.RequestOp_RequestTxn:
		return checkTxnRequest(uv.RequestTxn, maxTxnOps)
	default:
		// An op with nothing set: etcd answers "key not found".
		return rpctypes.ErrGRPCKeyNotFound
	}
}

// checkTxn is the whole check of a Txn as etcd's kvServer.Txn runs it: the
// structural checks first, then the put/delete overlap check, which is
// quadratic and so only runs on a request already bounded in size.
func checkTxn(r *pb.TxnRequest, maxTxnOps int) error {
	if err := checkTxnRequest(r, maxTxnOps); err != nil {
		return err
	}
	if _, _, err := checkIntervals(r.GetSuccess()); err != nil {
		return err
	}
	if _, _, err := checkIntervals(r.GetFailure()); err != nil {
		return err
	}
	return nil
}
