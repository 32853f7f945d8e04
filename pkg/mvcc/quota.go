package mvcc

import (
	"context"
	"log/slog"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"
)

// kvOverhead approximates the storage a put costs beyond its key and value,
// as etcd's quota does.
const kvOverhead = 256

// quota watches the database size against QuotaBackendBytes and mirrors the
// active alarms. Like etcd, an exhausted quota raises NOSPACE, and while a
// NOSPACE alarm is active writes that can grow the database (put, txn with a
// put, lease grant) are refused until an operator frees space and disarms the
// alarm. Alarms are state: they change only through applied Alarm requests
// and are stored with the data, so they survive a restart as etcd's do.
type quota struct {
	limit int64 // <= 0: no quota
	b     Backend
	log   *slog.Logger

	mu        sync.Mutex // guards the fields below
	size      int64
	checkedAt time.Time
	alarms    []*pb.AlarmMember // as of the last commit, in (member, type) order
	// exceeded is set when a request found the quota exhausted, so the
	// requests after it are refused while the NOSPACE alarm is raised.
	exceeded bool
	// nearWarned: the "near its quota" warning was logged and is not
	// repeated until the size falls back below nearQuotaClear.
	nearWarned bool
}

// An operator is warned when the database passes nearQuotaWarn of its
// quota, before NOSPACE stops writes; once, until it falls below
// nearQuotaClear (compaction and defragmentation).
const (
	nearQuotaWarn  = 0.9
	nearQuotaClear = 0.8
)

// check admits or refuses a write request. raise reports that this request
// found the quota exhausted: the caller raises the NOSPACE alarm.
func (q *quota) check(r *pb.InternalRaftRequest) (raise bool, err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	// A member found corrupt stops every write until an operator disarms
	// the alarm, as etcd's corrupt evaluator does.
	if hasAlarm(q.alarms, pb.AlarmType_CORRUPT) {
		return false, ErrCorrupt
	}
	if !growsDatabase(r) {
		return false, nil
	}
	if q.exceeded || hasAlarm(q.alarms, pb.AlarmType_NOSPACE) {
		return false, ErrNoSpace
	}
	if q.limit > 0 && q.size+int64(proto.Size(r))+kvOverhead > q.limit {
		q.exceeded = true
		return true, ErrNoSpace
	}
	return false, nil
}

// setAlarms records the alarms committed by the writer. Disarming NOSPACE
// forgets the exhausted quota and forces a fresh size reading.
func (q *quota) setAlarms(alarms []*pb.AlarmMember) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.alarms = alarms
	if !hasAlarm(alarms, pb.AlarmType_NOSPACE) {
		q.exceeded = false
		q.checkedAt = time.Time{}
	}
}

// get lists the active alarms of type t (every alarm for NONE), as etcd's
// Alarm GET does.
func (q *quota) get(t pb.AlarmType) []*pb.AlarmMember {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []*pb.AlarmMember
	for _, a := range q.alarms {
		if t == pb.AlarmType_NONE || a.Alarm == t {
			out = append(out, a)
		}
	}
	return out
}

func hasAlarm(alarms []*pb.AlarmMember, t pb.AlarmType) bool {
	for _, a := range alarms {
		if a.Alarm == t {
			return true
		}
	}
	return false
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

// refreshIfForgotten reads the size again when setAlarms forgot it (a
// disarmed NOSPACE), before the next write is judged by it: a server that
// refuses every write never commits, so afterCommit would never refresh it.
func (q *quota) refreshIfForgotten(ctx context.Context) {
	q.mu.Lock()
	forgotten := q.checkedAt.IsZero()
	q.mu.Unlock()
	if forgotten {
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
	warn := false
	if q.limit > 0 {
		switch ratio := float64(size) / float64(q.limit); {
		case ratio >= nearQuotaWarn && !q.nearWarned:
			q.nearWarned, warn = true, true
		case ratio < nearQuotaClear:
			q.nearWarned = false
		}
	}
	q.mu.Unlock()
	if warn && q.log != nil {
		q.log.Warn("database size is near its quota: compact and defragment, or raise --quota-backend-bytes, before NOSPACE refuses writes",
			"size_bytes", size, "quota_bytes", q.limit, "used_percent", int(100*float64(size)/float64(q.limit)))
	}
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
