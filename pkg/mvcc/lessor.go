package mvcc

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"sync"
	"time"
)

// MaxLeaseTTL is etcd's upper bound on a lease TTL in seconds.
const MaxLeaseTTL = 9_000_000_000

// lessor keeps the time side of leases: when each one expires. Which leases
// exist is decided by applied writes (grant, revoke), so every replica agrees;
// when one expires is local time, so only the node that runs the lessor's
// expiry loop decides it and turns the decision into a revoke request.
type lessor struct {
	mu     sync.Mutex // guards leases
	leases map[int64]*leaseTimer
	now    func() time.Time
}

type leaseTimer struct {
	ttl      int64
	expiry   time.Time
	revoking bool // a revoke for this lease is queued; do not queue another
}

func newLessor(now func() time.Time) *lessor {
	return &lessor{leases: map[int64]*leaseTimer{}, now: now}
}

// reconcile makes the clocks follow the stored lease table, after other
// Stores granted or revoked leases: a lease new to this Store starts with
// its full TTL, a lease no longer stored is forgotten.
func (l *lessor) reconcile(stored []Lease) {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := make(map[int64]bool, len(stored))
	for _, le := range stored {
		seen[le.ID] = true
		if _, ok := l.leases[le.ID]; !ok {
			l.leases[le.ID] = &leaseTimer{ttl: le.TTL, expiry: l.now().Add(time.Duration(le.TTL) * time.Second)}
		}
	}
	for id := range l.leases {
		if !seen[id] {
			delete(l.leases, id)
		}
	}
}

// promote gives every lease its full TTL, as etcd's lessor does when its
// member becomes leader: renewals sent to the previous holder of lease
// expiry may never have reached this one.
func (l *lessor) promote() {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	for _, t := range l.leases {
		t.expiry = now.Add(time.Duration(t.ttl) * time.Second)
	}
}

// renewedElsewhere restarts the clock of a lease another Store kept alive.
func (l *lessor) renewedElsewhere(id int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t, ok := l.leases[id]; ok && !t.revoking {
		t.expiry = l.now().Add(time.Duration(t.ttl) * time.Second)
	}
}

// granted starts a lease's clock (on grant, and for every lease on open: a
// restart gives every lease its full TTL, as etcd's does).
func (l *lessor) granted(le Lease) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.leases[le.ID] = &leaseTimer{ttl: le.TTL, expiry: l.now().Add(time.Duration(le.TTL) * time.Second)}
}

func (l *lessor) revoked(id int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.leases, id)
}

// renew restarts the clock of a lease that has not expired.
func (l *lessor) renew(id int64) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.leases[id]
	if !ok || t.revoking || !l.now().Before(t.expiry) {
		return 0, ErrLeaseNotFound
	}
	t.expiry = l.now().Add(time.Duration(t.ttl) * time.Second)
	return t.ttl, nil
}

// remaining returns the granted TTL and the whole seconds left.
func (l *lessor) remaining(id int64) (granted, left int64, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.leases[id]
	if !ok {
		return 0, 0, false
	}
	left = int64(t.expiry.Sub(l.now()).Seconds())
	if left < 0 {
		left = 0
	}
	return t.ttl, left, true
}

// expired marks and returns the leases whose time is up and that have no
// revoke queued yet, in ID order.
func (l *lessor) expired() []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	var ids []int64
	for id, t := range l.leases {
		if !t.revoking && !now.Before(t.expiry) {
			t.revoking = true
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// extend restarts the clock of a lease whose expiry revoke the storage
// refused (errLeaseRenewed).
func (l *lessor) extend(id int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t, ok := l.leases[id]; ok {
		t.revoking = false
		t.expiry = l.now().Add(time.Duration(t.ttl) * time.Second)
	}
}

// unmark lets a failed revoke be retried on the next round.
func (l *lessor) unmark(id int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t, ok := l.leases[id]; ok {
		t.revoking = false
	}
}

// expiryLoop revokes expired leases through the write path until ctx ends.
func (s *Store) expiryLoop(ctx context.Context, interval time.Duration) {
	defer s.wg.Done()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		// Only one Store of a shared storage decides that leases expired.
		if !s.primary.Load() {
			continue
		}
		for _, id := range s.lessor.expired() {
			err := s.seq.revokeExpired(ctx, id)
			switch {
			case errors.Is(err, errLeaseRenewed):
				// Kept alive through a server whose notice this Store
				// missed: its clock starts again.
				s.log.Info("expired lease was renewed elsewhere; not revoked", slog.Int64("lease", id))
				s.lessor.extend(id)
			case err == nil, isRequestError(err):
			case ctx.Err() != nil:
				return
			default:
				s.log.Warn("revoke expired lease", slog.Int64("lease", id), slog.Any("err", err))
				s.lessor.unmark(id)
			}
		}
	}
}

// batchLeases collects the lease grants and revokes of the current,
// uncommitted batch, for the lessor's clocks once the batch is durable.
// Whether a lease exists is asked of the transaction (evaluator.leaseExists).
type batchLeases struct {
	base    *lessor
	granted map[int64]Lease
	revoked map[int64]bool
}

func newBatchLeases(base *lessor) *batchLeases {
	return &batchLeases{base: base, granted: map[int64]Lease{}, revoked: map[int64]bool{}}
}

func (b *batchLeases) record(res *applyResult) {
	if res.granted != nil {
		b.granted[res.granted.ID] = *res.granted
		delete(b.revoked, res.granted.ID)
	}
	if res.revoked != 0 {
		b.revoked[res.revoked] = true
		delete(b.granted, res.revoked)
	}
}

// commit hands the batch's lease changes to the lessor after the batch is
// durable.
func (b *batchLeases) commit() {
	for id := range b.revoked {
		b.base.revoked(id)
	}
	for _, l := range b.granted {
		b.base.granted(l)
	}
}
