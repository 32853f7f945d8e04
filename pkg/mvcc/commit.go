package mvcc

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"
)

// The commit tail: every mode's writes, a batch of client requests (the
// local writer, a shared storage) or a batch of a replicated log's
// committed entries, end here, on the writer's goroutine. The batch is
// applied in one transaction and committed once; only then do the state
// kept in memory (lessor, alarms, auth, compacted revision) and the feed
// (current revision, watchers) move, in one publish step.

// request is one write request on its way through the commit tail.
type request struct {
	ctx context.Context
	req *pb.InternalRaftRequest
	// index is the position of a replicated log's committed entry, stored
	// with the batch's rows (AppliedIndexTx) when the sequencer
	// appliesLogEntries; 0 for a request this Store orders itself.
	index uint64
	// expiry marks a lease revoke asked for by the expiry loop, which the
	// storage may refuse (sharedSequencer.revokeExpired).
	expiry bool
	// refused marks a replicated request already answered with the error
	// of a limit every node hits alike: the batch is applied again
	// without it (commit).
	refused bool
	resp    proto.Message
	err     error
}

// committed is one revision made durable by a batch, waiting to be published.
type committed struct {
	rev     int64
	changes []Change
}

// applyError is a storage error raised while applying one request, as
// opposed to beginning or committing the batch's transaction.
type applyError struct {
	err error
	req *request // the request being applied
}

func (e *applyError) Error() string { return e.err.Error() }
func (e *applyError) Unwrap() error { return e.err }

// commit applies reqs in one transaction, commits it, and publishes the
// revisions it made. On success every request holds its answer (a response,
// or an error that rejects it alone). A failure leaves no trace: the
// transaction rolls back and nothing in memory moved.
//
// When the failure came from applying one request, not from the commit,
// the requests are applied again one per transaction, so only the one that
// cannot be stored fails. A request this Store orders itself is then
// answered with its error. A replicated log's committed entry must be
// applied on every node alike: it may be answered with an error only for a
// limit every node hits alike (ErrTooManyChanges): it alone is answered
// with it and the rest of the batch is applied again without it, in one
// transaction. Any other error is returned, and the node stops rather than
// differ from the others.
func (s *Store) commit(reqs []*request) error {
	for _, r := range reqs {
		traceFrom(r.ctx).step("queued for the writer")
	}
	revs, err := s.applyAndCommitRetrying(reqs)
	if err == nil {
		for _, r := range reqs {
			traceFrom(r.ctx).step("applied and committed in the database (group commit)")
		}
		s.publishCommitted(revs)
		for _, r := range reqs {
			traceFrom(r.ctx).step("published to watchers")
		}
		s.quota.afterCommit(s.ctx)
		return nil
	}
	s.warnDiskFull(err)
	if errors.Is(err, ErrConflict) {
		// Every attempt lost; applying the requests one by one would
		// only lose again.
		return err
	}
	var ae *applyError
	replicated := s.seq.appliesLogEntries()
	if !errors.As(err, &ae) || isDiskFull(err) || (replicated && !errors.Is(err, ErrTooManyChanges)) {
		return err
	}
	if replicated {
		// The request that hit the limit is answered with it and changes
		// nothing; the batch is applied again without it, still in one
		// transaction that records the batch's last index, so a replay
		// does not retry it. A replicated batch is never split: the
		// requests of one packed entry share its index, and a transaction
		// holding some of them could not record it.
		ae.req.resp, ae.req.err, ae.req.refused = nil, err, true
		return s.commit(reqs)
	}
	if len(reqs) > 1 {
		for _, r := range reqs {
			if err := s.commit([]*request{r}); err != nil {
				return err
			}
		}
		return nil
	}
	reqs[0].resp, reqs[0].err = nil, err
	return nil
}

// conflictRetries bounds how often a batch that lost to a concurrent
// writer (ErrConflict) is applied again before its requests fail. Each
// attempt waits a random pause up to conflictPause << attempt (at most
// conflictPauseMax), so two servers that collided do not collide again in
// step.
const (
	conflictRetries  = 16
	conflictPause    = time.Millisecond
	conflictPauseMax = 50 * time.Millisecond
)

// applyAndCommitRetrying is applyAndCommit, applied again while the
// storage aborts it for a concurrent writer's transaction. Nothing of an
// aborted attempt was committed nor kept in memory, and the next attempt
// reads the revisions afresh, so it orders the batch after the winner.
// A replicated log's entries never meet a concurrent writer.
func (s *Store) applyAndCommitRetrying(reqs []*request) ([]committed, error) {
	if s.seq.appliesLogEntries() {
		return s.applyAndCommit(reqs)
	}
	var revs []committed
	err := s.retryConflicts(s.ctx, func() (err error) {
		revs, err = s.applyAndCommit(reqs)
		return err
	})
	return revs, err
}

// retryConflicts runs a write transaction, f, again while it loses to a
// concurrent writer's (ErrConflict), conflictRetries times at most. f must
// leave nothing behind when it fails, as every write transaction does.
func (s *Store) retryConflicts(ctx context.Context, f func() error) error {
	err := f()
	for attempt := 0; errors.Is(err, ErrConflict) && attempt < conflictRetries; attempt++ {
		s.conflicts.Add(1)
		pause := time.Duration(rand.Int64N(int64(min(conflictPause<<attempt, conflictPauseMax)))) + 1
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return err
		}
		err = f()
	}
	return err
}

// publishCommitted publishes a batch's revisions. Revisions between the
// last one published and the batch's first were committed by other Stores
// of a shared storage (its revision lock ordered them before this batch):
// they are read from the log and published first.
func (s *Store) publishCommitted(revs []committed) {
	if len(revs) > 0 && revs[0].rev != s.current.Load()+1 {
		if err := s.readLog(s.ctx, revs[0].rev-1, 0); err != nil {
			s.log.Warn("read other servers' revisions before this batch's", "err", err)
		}
	}
	for _, c := range revs {
		s.publish(c.rev, c.changes)
	}
}

// publish is the one step that makes a committed revision visible to the
// feed: the current revision moves and watchers get its events, together,
// in revision order. Every revision reaches it, whether this Store
// committed it or read it from the log (feed.go).
func (s *Store) publish(rev int64, changes []Change) {
	s.current.Store(rev)
	s.hub.publish(rev, changes)
}

// applyAndCommit applies reqs in one transaction and commits it. On
// failure every request's answer is cleared: none of them happened.
func (s *Store) applyAndCommit(reqs []*request) ([]committed, error) {
	b, err := s.commitTx(reqs)
	if err != nil {
		for _, r := range reqs {
			if !r.refused {
				r.resp, r.err = nil, nil
			}
		}
		return nil, err
	}
	// Durable: what memory keeps may follow now.
	b.leases.commit()
	s.auth.commit(b.auth)
	if b.alarms != nil {
		s.quota.setAlarms(b.alarms)
	}
	if b.compacted != 0 {
		s.compacted.Store(b.compacted)
		s.physical.notify(b.compacted)
	} else if b.storedCompacted > s.compacted.Load() {
		// Another Store compacted (shared storage); its notice may still be
		// on its way.
		s.compacted.Store(b.storedCompacted)
	}
	return b.revs, nil
}

// appliedBatch is what one batch's transaction did, for memory to follow
// once it is committed.
type appliedBatch struct {
	revs   []committed
	leases *batchLeases
	auth   *stagedAuth
	// alarms is the alarm list after the batch, if it changed.
	alarms []*pb.AlarmMember
	// compacted is the revision a Compaction request of the batch moved
	// the compacted revision to; storedCompacted the compacted revision
	// the transaction ended with.
	compacted, storedCompacted int64
}

func (s *Store) commitTx(reqs []*request) (*appliedBatch, error) {
	if err := s.guard.lost(); err != nil {
		return nil, err
	}
	tx, applied, err := s.seq.beginBatch(reqs)
	if err != nil {
		return nil, s.guard.note(fmt.Errorf("begin write: %w", err))
	}
	b, err := s.applyInTx(tx, applied, reqs)
	if err != nil {
		_ = tx.Rollback()
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	return b, nil
}

// applyInTx applies reqs in tx; applied, when the sequencer applies log
// entries, is tx again, in which the batch's last index is recorded.
func (s *Store) applyInTx(tx WriteTx, applied AppliedIndexTx, reqs []*request) (*appliedBatch, error) {
	current, compacted, err := tx.Revisions(s.ctx)
	if err != nil {
		return nil, fmt.Errorf("read revisions: %w", err)
	}
	// On the writer's goroutine s.current cannot move meanwhile.
	if err := s.guard.behind(current, s.current.Load()); err != nil {
		return nil, err
	}
	b := &appliedBatch{leases: newBatchLeases(s.lessor), auth: s.auth.stage()}
	defer b.auth.close()
	for _, r := range reqs {
		if r.refused {
			continue
		}
		if isAuthChange(r.req) {
			r.resp, r.err = b.auth.apply(r.req)
			continue
		}
		a := &evaluator{ctx: s.ctx, tx: tx, w: tx, current: current, compacted: compacted, expiry: r.expiry,
			prevValues: s.hub.wantsPrev()}
		res, err := a.apply(r.req)
		if err != nil {
			if isRequestError(err) && len(a.changes) == 0 {
				r.err = err
				continue
			}
			return nil, &applyError{err: err, req: r}
		}
		r.resp = res.resp
		b.leases.record(res)
		if res.alarms != nil {
			b.alarms = res.alarms
		}
		if res.compacted != 0 {
			compacted, b.compacted = res.compacted, res.compacted
		}
		if len(res.changes) > 0 {
			current++
			b.revs = append(b.revs, committed{rev: current, changes: res.changes})
		}
	}
	b.storedCompacted = compacted
	// One statement per batch moves the stored current revision, instead
	// of one per request.
	if len(b.revs) > 0 {
		if err := tx.SetRevisions(s.ctx, current, compacted); err != nil {
			return nil, fmt.Errorf("set revisions: %w", err)
		}
	}
	if err := b.auth.store(s.ctx, tx); err != nil {
		return nil, err
	}
	if applied != nil {
		if err := applied.SetAppliedIndex(s.ctx, reqs[len(reqs)-1].index); err != nil {
			return nil, fmt.Errorf("record applied index: %w", err)
		}
	}
	return b, nil
}

// beginWrite begins the transaction of a batch of writes this Store
// orders itself, with the keys it will read prefetched where the Backend
// can (Prefetcher).
func (s *Store) beginWrite(reqs []*request) (WriteTx, error) {
	if pf, ok := s.b.(Prefetcher); ok {
		if keys := batchKeys(reqs); len(keys) > 0 {
			return pf.BeginWritePrefetch(s.ctx, keys)
		}
	}
	return s.b.BeginWrite(s.ctx)
}
