package mvcc

import (
	"context"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"
)

// kvOverhead approximates the storage a put costs beyond its key and value,
// as etcd's quota does.
const kvOverhead = 256

// quota watches the database size against QuotaBackendBytes and holds the
// alarms. Like etcd, an exhausted quota raises NOSPACE, and while NOSPACE is
// active writes that can grow the database (put, txn with a put, lease
// grant) are refused until an operator frees space and disarms the alarm.
type quota struct {
	limit    int64 // <= 0: no quota
	b        Backend
	memberID uint64

	mu        sync.Mutex // guards the fields below
	size      int64
	checkedAt time.Time
	nospace   bool
}

// check admits or refuses a write request.
func (q *quota) check(r *pb.InternalRaftRequest) error {
	if !growsDatabase(r) {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.nospace {
		return ErrNoSpace
	}
	if q.limit <= 0 {
		return nil
	}
	if q.size+int64(proto.Size(r))+kvOverhead > q.limit {
		q.nospace = true
		return ErrNoSpace
	}
	return nil
}

// afterCommit refreshes the cached size, at most every 100 ms, so the quota
// check on the hot path stays a comparison.
func (q *quota) afterCommit(ctx context.Context) {
	q.mu.Lock()
	stale := time.Since(q.checkedAt) > 100*time.Millisecond
	q.mu.Unlock()
	if stale {
		q.refresh(ctx)
	}
}

func (q *quota) refresh(ctx context.Context) {
	size, _, err := q.b.Size(ctx)
	if err != nil {
		return
	}
	q.mu.Lock()
	q.size, q.checkedAt = size, time.Now()
	q.mu.Unlock()
}

func growsDatabase(r *pb.InternalRaftRequest) bool {
	switch {
	case r.Put != nil, r.LeaseGrant != nil:
		return true
	case r.Txn != nil:
		return txnHasPut(r.Txn)
	}
	return false
}

func txnHasPut(t *pb.TxnRequest) bool {
	for _, ops := range [][]*pb.RequestOp{t.Success, t.Failure} {
		for _, op := range ops {
			if op.GetRequestPut() != nil {
				return true
			}
			if n := op.GetRequestTxn(); n != nil && txnHasPut(n) {
				return true
			}
		}
	}
	return false
}

// alarm serves the Alarm RPC: GET lists, ACTIVATE raises, DEACTIVATE disarms.
func (q *quota) alarm(r *pb.AlarmRequest) *pb.AlarmResponse {
	q.mu.Lock()
	defer q.mu.Unlock()
	resp := &pb.AlarmResponse{Header: &pb.ResponseHeader{}}
	nospace := func() *pb.AlarmMember {
		return &pb.AlarmMember{MemberID: q.memberID, Alarm: pb.AlarmType_NOSPACE}
	}
	switch r.Action {
	case pb.AlarmRequest_GET:
		if q.nospace && (r.Alarm == pb.AlarmType_NONE || r.Alarm == pb.AlarmType_NOSPACE) {
			resp.Alarms = append(resp.Alarms, nospace())
		}
	case pb.AlarmRequest_ACTIVATE:
		if r.Alarm == pb.AlarmType_NOSPACE && !q.nospace {
			q.nospace = true
			resp.Alarms = append(resp.Alarms, nospace())
		}
	case pb.AlarmRequest_DEACTIVATE:
		if r.Alarm == pb.AlarmType_NOSPACE && q.nospace {
			q.nospace = false
			q.checkedAt = time.Time{}
			resp.Alarms = append(resp.Alarms, nospace())
		}
	}
	return resp
}

func (q *quota) active() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.nospace
}
