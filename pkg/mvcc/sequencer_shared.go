package mvcc

import (
	"context"
	"errors"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"
)

// sharedSequencer orders the writes of one of several Stores on a shared
// storage: BeginWrite takes the storage's revision lock, so commit order is
// revision order across every Store. This Store's feed also carries the
// others' commits, which the storage's notices announce (feed.go).
type sharedSequencer struct {
	s       *Store
	shared  Shared
	notices <-chan Notice
}

func (q *sharedSequencer) appliesLogEntries() bool { return false }

func (q *sharedSequencer) beginBatch(reqs []*request) (WriteTx, AppliedIndexTx, error) {
	tx, err := q.s.beginWrite(reqs)
	return tx, nil, err
}

func (q *sharedSequencer) start() error {
	s := q.s
	s.wg.Add(2)
	go s.roleLoop(s.ctx, q.shared.Primary())
	go q.forwardNotices()
	return nil
}

// forwardNotices hands the storage's notices to the writer, in order.
func (q *sharedSequencer) forwardNotices() {
	s := q.s
	defer s.wg.Done()
	for {
		select {
		case <-s.ctx.Done():
			return
		case n, ok := <-q.notices:
			if !ok {
				return
			}
			if s.send(s.ctx, &followJob{n: n}) != nil {
				return
			}
		}
	}
}

func (q *sharedSequencer) write(ctx context.Context, r *pb.InternalRaftRequest) (proto.Message, error) {
	return q.s.enqueueWrite(ctx, r)
}

// Every acknowledged write, this Store's or another's, was committed in
// the storage before its answer, and reads read the storage.
func (q *sharedSequencer) readBarrier(context.Context) error { return nil }

func (q *sharedSequencer) sync(ctx context.Context) error {
	j := &syncJob{waiter: newWaiter()}
	return q.s.enqueue(ctx, j, &j.waiter)
}

// renewLease restarts the lease's clock here and announces the renewal to
// the other Stores: every Store's clock answers TimeToLive and KeepAlive,
// and any of them may become the one that decides expiry.
func (q *sharedSequencer) renewLease(ctx context.Context, id int64) (int64, error) {
	ttl, err := q.s.lessor.renew(id)
	if errors.Is(err, ErrLeaseNotFound) {
		// Granted through another server a moment ago?
		if err := q.sync(ctx); err != nil {
			return 0, err
		}
		ttl, err = q.s.lessor.renew(id)
	}
	if err != nil {
		return 0, err
	}
	if err := q.shared.RenewLease(ctx, id); err != nil {
		if errors.Is(err, ErrLeaseNotFound) {
			// Revoked through another server, which this one has not heard
			// of yet: the storage has the last word.
			return 0, ErrLeaseNotFound
		}
		return 0, fmt.Errorf("renew lease %d: %w", id, err)
	}
	return ttl, nil
}

// revokeExpired marks the revoke as an expiry: a Store that missed the
// renewals made through the other servers (its notices lost, or two
// Stores briefly both primary) must not revoke a lease kept alive
// elsewhere. The storage's record of the last renewal, read inside the
// revoking transaction (LeaseExpiryTx), decides.
func (q *sharedSequencer) revokeExpired(ctx context.Context, id int64) error {
	j := &writeJob{waiter: newWaiter(), request: request{ctx: ctx, req: revokeRequest(id), expiry: true}}
	if err := q.s.enqueue(ctx, j, &j.waiter); err != nil {
		return err
	}
	return j.err
}

// leaseTimeToLive first syncs: the lease may have been granted or
// revoked through another server a moment ago, and the answer must be
// linearizable as etcd's (which asks its leader) is.
func (q *sharedSequencer) leaseTimeToLive(ctx context.Context, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	if err := q.sync(ctx); err != nil {
		return nil, err
	}
	return q.s.localTimeToLive(ctx, r)
}
