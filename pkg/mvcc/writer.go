package mvcc

import (
	"context"
	"errors"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"
)

// pending is one queued unit of work for the writer: a client write request,
// a maintenance step (fn) that needs the write transaction to itself, a
// catch-up with a shared storage's commits (feed.go), or committed entries
// of a replicated log and a restore from a snapshot (replicated.go).
type pending struct {
	ctx      context.Context
	req      *pb.InternalRaftRequest
	fn       func(ctx context.Context, tx WriteTx) error
	catchUp  bool
	entries  []Entry
	outcomes []Outcome
	restore  bool
	resp     proto.Message
	err      error
	done     chan struct{}
}

// committed is one revision made durable by a batch, waiting to be published.
type committed struct {
	rev     int64
	changes []Change
}

// write queues r for the writer and waits for its answer. If ctx ends first
// the request may still be applied, as with etcd.
func (s *Store) write(ctx context.Context, r *pb.InternalRaftRequest) (proto.Message, error) {
	if s.repl != nil {
		return s.repl.Propose(ctx, r)
	}
	p := &pending{ctx: ctx, req: r, done: make(chan struct{})}
	return s.enqueue(ctx, p)
}

// maintain runs fn in a write transaction of its own, between batches.
func (s *Store) maintain(ctx context.Context, fn func(ctx context.Context, tx WriteTx) error) error {
	p := &pending{ctx: ctx, fn: fn, done: make(chan struct{})}
	_, err := s.enqueue(ctx, p)
	return err
}

func (s *Store) enqueue(ctx context.Context, p *pending) (proto.Message, error) {
	select {
	case s.writec <- p:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.stopc:
		return nil, ErrClosed
	}
	select {
	case <-p.done:
		return p.resp, p.err
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.stopc:
		return nil, ErrClosed
	}
}

// writeLoop is the single writer. It takes every request waiting (up to
// MaxBatch), applies them in order in one transaction, commits once (one
// fsync for all), publishes the events, then answers. This is group commit:
// throughput comes from sharing the fsync.
func (s *Store) writeLoop() {
	defer s.wg.Done()
	batch := make([]*pending, 0, s.cfg.MaxBatch)
	notices := s.notices
	for {
		select {
		case <-s.stopc:
			s.drainClosed()
			return
		case n, ok := <-notices:
			if !ok {
				notices = nil
				continue
			}
			s.follow(n)
			continue
		case p := <-s.writec:
			batch = append(batch[:0], p)
		}
		if !isWrite(batch[0]) {
			s.runMaintenance(batch[0])
			continue
		}
	fill:
		for len(batch) < s.cfg.MaxBatch {
			select {
			case p := <-s.writec:
				if !isWrite(p) {
					// Keep queue order: the batch so far, then the step.
					s.applyBatch(batch)
					s.runMaintenance(p)
					batch = batch[:0]
					break fill
				}
				batch = append(batch, p)
			default:
				break fill
			}
		}
		if len(batch) > 0 {
			s.applyBatch(batch)
		}
	}
}

// drainClosed fails requests still queued when the store closes.
func (s *Store) drainClosed() {
	for {
		select {
		case p := <-s.writec:
			p.err = ErrClosed
			close(p.done)
		default:
			return
		}
	}
}

func isWrite(p *pending) bool {
	return p.fn == nil && !p.catchUp && p.entries == nil && !p.restore
}

func (s *Store) runMaintenance(p *pending) {
	if p.entries != nil {
		s.applyEntries(p)
		return
	}
	defer close(p.done)
	if p.restore {
		p.err = s.restore(s.ctx)
		return
	}
	if p.catchUp {
		p.err = s.catchUp(s.ctx, 0, ChangedLeases|ChangedAlarms|ChangedCompacted)
		return
	}
	tx, err := s.b.BeginWrite(s.ctx)
	if err != nil {
		p.err = fmt.Errorf("begin maintenance: %w", err)
		return
	}
	if err := p.fn(s.ctx, tx); err != nil {
		_ = tx.Rollback()
		p.err = err
		return
	}
	if err := tx.Commit(); err != nil {
		p.err = fmt.Errorf("commit maintenance: %w", err)
	}
}

// applyBatch applies batch in one transaction. A storage failure fails every
// request of the batch and leaves no trace: the transaction rolls back and
// neither the revision counter nor the lessor moved. When the failure came
// from applying one request (a driver limit such as the changes one revision
// can hold), not from the commit, each request is applied again in a
// transaction of its own, so only the request that cannot be stored fails.
func (s *Store) applyBatch(batch []*pending) {
	for _, p := range batch {
		traceFrom(p.ctx).step("queued for the writer")
	}
	revs, err := s.applyAndCommit(batch)
	var applyErr *applyError
	if err != nil && len(batch) > 1 && errors.As(err, &applyErr) {
		for _, p := range batch {
			p.err, p.resp = nil, nil
			s.applyBatch([]*pending{p})
		}
		return
	}
	if err != nil {
		s.warnDiskFull(err)
		s.log.Error("write batch failed", "requests", len(batch), "err", err)
		for _, p := range batch {
			if p.err == nil {
				p.err = err
			}
			p.resp = nil
			close(p.done)
		}
		return
	}
	if len(revs) > 0 && revs[0].rev != s.current.Load()+1 && s.shared != nil {
		// Other Stores committed the revisions between: publish them first.
		if err := s.catchUp(s.ctx, revs[0].rev-1, 0); err != nil {
			s.log.Warn("read other servers' revisions before this batch's", "err", err)
		}
	}
	for _, p := range batch {
		traceFrom(p.ctx).step("applied and committed in the database (group commit)")
	}
	for _, c := range revs {
		s.current.Store(c.rev)
		s.hub.publish(c.rev, c.changes)
	}
	for _, p := range batch {
		traceFrom(p.ctx).step("published to watchers")
		close(p.done)
	}
	s.quota.afterCommit(s.ctx)
}

func (s *Store) applyAndCommit(batch []*pending) ([]committed, error) {
	return s.applyAndCommitAt(batch, 0)
}

// applyAndCommitAt is applyAndCommit that also records index, the last
// replicated log entry of the batch (0: the batch is not replicated).
func (s *Store) applyAndCommitAt(batch []*pending, index uint64) ([]committed, error) {
	revs, authTouched, err := s.applyAndCommitTx(batch, index)
	if err != nil && authTouched {
		// The transaction that stored the changed auth state did not
		// commit: the auth store follows the database again.
		if rerr := s.reloadAuth(s.ctx); rerr != nil {
			s.log.Error("reload auth state after a failed write", "err", rerr)
		}
	}
	return revs, err
}

func (s *Store) applyAndCommitTx(batch []*pending, index uint64) (_ []committed, authTouched bool, _ error) {
	tx, err := s.beginBatch(batch)
	if err != nil {
		return nil, authTouched, fmt.Errorf("begin write: %w", err)
	}
	current, compacted, err := tx.Revisions(s.ctx)
	if err != nil {
		_ = tx.Rollback()
		return nil, authTouched, fmt.Errorf("read revisions: %w", err)
	}
	leases := &batchLeases{base: s.lessor, granted: map[int64]Lease{}, revoked: map[int64]bool{}}
	var revs []committed
	var alarms []*pb.AlarmMember // the alarm list after the batch, if it changed
	newCompacted := int64(0)
	for _, p := range batch {
		if isAuthChange(p.req) {
			authTouched = true
			p.resp, p.err = s.applyAuth(p.req)
			continue
		}
		a := &applier{ctx: s.ctx, tx: tx, current: current, compacted: compacted}
		res, err := a.apply(p.req)
		if err != nil {
			if isRequestError(err) && len(a.changes) == 0 {
				p.err = err
				continue
			}
			_ = tx.Rollback()
			return nil, authTouched, &applyError{err}
		}
		p.resp = res.resp
		leases.record(res)
		if res.alarms != nil {
			alarms = res.alarms
		}
		if res.compacted != 0 {
			compacted, newCompacted = res.compacted, res.compacted
		}
		if len(res.changes) > 0 {
			current++
			revs = append(revs, committed{rev: current, changes: res.changes})
		}
	}
	// One statement per batch moves the stored current revision, instead
	// of one per request.
	if len(revs) > 0 {
		if err := tx.SetRevisions(s.ctx, current, compacted); err != nil {
			_ = tx.Rollback()
			return nil, authTouched, fmt.Errorf("set revisions: %w", err)
		}
	}
	if authTouched {
		if err := s.storeAuth(s.ctx, tx); err != nil {
			_ = tx.Rollback()
			return nil, authTouched, err
		}
	}
	if index != 0 {
		at, ok := tx.(AppliedIndexTx)
		if !ok {
			_ = tx.Rollback()
			return nil, authTouched, errNotAppliedIndexTx
		}
		if err := at.SetAppliedIndex(s.ctx, index); err != nil {
			_ = tx.Rollback()
			return nil, authTouched, fmt.Errorf("record applied index: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, authTouched, fmt.Errorf("commit: %w", err)
	}
	leases.commit()
	if alarms != nil {
		s.quota.setAlarms(alarms)
	}
	if newCompacted != 0 {
		s.compacted.Store(newCompacted)
		s.compactor.notify(newCompacted)
	} else if compacted > s.compacted.Load() {
		// Another Store compacted (shared storage); its notice may still be
		// on its way.
		s.compacted.Store(compacted)
	}
	return revs, authTouched, nil
}

// beginBatch begins the batch's transaction, with the keys it will read
// prefetched where the Backend can (Prefetcher).
func (s *Store) beginBatch(batch []*pending) (WriteTx, error) {
	if pf, ok := s.b.(Prefetcher); ok {
		if keys := batchKeys(batch); len(keys) > 0 {
			return pf.BeginWritePrefetch(s.ctx, keys)
		}
	}
	return s.b.BeginWrite(s.ctx)
}

// applyError is a storage error raised while applying one request, as
// opposed to beginning or committing the batch's transaction.
type applyError struct{ err error }

func (e *applyError) Error() string { return e.err.Error() }
func (e *applyError) Unwrap() error { return e.err }
