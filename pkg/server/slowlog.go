package server

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/kite-db/kite/pkg/mvcc"
)

// DefaultWarningApplyDuration is etcd's --warning-apply-duration.
const DefaultWarningApplyDuration = 100 * time.Millisecond

// slowUnary logs, as etcd's "apply request took too long" warning, every
// key-value or lease request that took longer than d to answer, with the
// request (keys and sizes, never values: they may be secrets) and the size
// of the answer. Operators grep for etcd's message; so do its alerts.
func slowUnary(log *slog.Logger, d time.Duration) grpc.UnaryServerInterceptor {
	log = log.With("component", "apply")
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		prefix, desc, ok := describeRequest(req)
		if !ok {
			return handler(ctx, req)
		}
		ctx, trace := mvcc.WithTrace(ctx)
		resp, err := handler(ctx, req)
		end := time.Now()
		took := end.Sub(trace.Start())
		if took <= d {
			return resp, err
		}
		logTrace(log, trace, end, info.FullMethod, desc)
		attrs := []any{"took", took, "expected-duration", d, "prefix", prefix, "request", desc}
		if m, isMsg := resp.(proto.Message); isMsg && resp != nil {
			attrs = append(attrs, "response-size", proto.Size(m))
		}
		if r, isRange := resp.(*pb.RangeResponse); isRange && r != nil {
			attrs = append(attrs, "response-count", r.Count)
		}
		if err != nil {
			attrs = append(attrs, "error", err)
		}
		log.Warn("apply request took too long", attrs...)
		return resp, err
	}
}

// logTrace logs where a slow request's time went, as etcd logs the trace
// of an expensive request: each step the Store marked, with its duration.
func logTrace(log *slog.Logger, t *mvcc.Trace, end time.Time, method, desc string) {
	id := fmt.Sprintf("%d", t.Start().UnixNano())
	prev := t.Start()
	var steps []string
	for _, st := range t.Steps() {
		steps = append(steps, fmt.Sprintf("trace[%s] '%s' (duration: %v)", id, st.Name, st.At.Sub(prev)))
		prev = st.At
	}
	log.Info(fmt.Sprintf("trace[%s] %s", id, method[strings.LastIndex(method, "/")+1:]),
		"detail", desc, "duration", end.Sub(t.Start()), "start", t.Start(), "end", end,
		"steps", steps, "step_count", len(steps))
}

// describeRequest is a request as the warning shows it: etcd's prefix
// ("read-only range " for reads) and the request without values.
func describeRequest(req any) (prefix, desc string, ok bool) {
	switch r := req.(type) {
	case *pb.RangeRequest:
		return "read-only range ", fmt.Sprintf("key:%q range_end:%q limit:%d revision:%d count_only:%v keys_only:%v serializable:%v",
			r.Key, r.RangeEnd, r.Limit, r.Revision, r.CountOnly, r.KeysOnly, r.Serializable), true
	case *pb.PutRequest:
		return "", putString(r), true
	case *pb.DeleteRangeRequest:
		return "", fmt.Sprintf("delete_range key:%q range_end:%q", r.Key, r.RangeEnd), true
	case *pb.TxnRequest:
		prefix := ""
		if mvcc.IsReadOnlyTxn(r) {
			prefix = "read-only txn "
		}
		return prefix, fmt.Sprintf("compare:%d success:%s failure:%s", len(r.Compare), opsString(r.Success), opsString(r.Failure)), true
	case *pb.CompactionRequest:
		return "", fmt.Sprintf("compaction revision:%d physical:%v", r.Revision, r.Physical), true
	case *pb.LeaseGrantRequest:
		return "", fmt.Sprintf("lease_grant ttl:%d id:%x", r.TTL, r.ID), true
	case *pb.LeaseRevokeRequest:
		return "", fmt.Sprintf("lease_revoke id:%x", r.ID), true
	}
	return "", "", false
}

func putString(r *pb.PutRequest) string {
	return fmt.Sprintf("put key:%q value_size:%d lease:%d", r.Key, len(r.Value), r.Lease)
}

func opsString(ops []*pb.RequestOp) string {
	s := "["
	for i, op := range ops {
		if i > 0 {
			s += " "
		}
		switch o := op.Request.(type) {
		case *pb.RequestOp_RequestRange:
			s += fmt.Sprintf("range key:%q", o.RequestRange.Key)
		case *pb.RequestOp_RequestPut:
			s += putString(o.RequestPut)
		case *pb.RequestOp_RequestDeleteRange:
			s += fmt.Sprintf("delete_range key:%q", o.RequestDeleteRange.Key)
		case *pb.RequestOp_RequestTxn:
			s += "txn"
		}
	}
	return s + "]"
}
