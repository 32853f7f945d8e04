package mvcc

import (
	"context"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"
)

// The writer is the one goroutine that changes the storage and the state
// derived from it. Work reaches it as typed jobs on one queue, in order:
// client writes (writeJob) are batched, every one waiting sharing a
// transaction and its commit (group commit); every other job runs alone,
// between batches.

// job is one unit of work for the writer.
type job interface {
	// run does the job on the writer's goroutine.
	run(s *Store)
	// fail answers a job the writer will never run (the store closed).
	fail(err error)
}

// waiter is the answer side of a job a caller waits for.
type waiter struct {
	done   chan struct{}
	result error
}

func newWaiter() waiter { return waiter{done: make(chan struct{})} }

func (w *waiter) finish(err error) {
	w.result = err
	close(w.done)
}

func (w *waiter) fail(err error) { w.finish(err) }

// writeJob is a client's write request: it is ordered by this Store's
// writer (not by a replicated log) and answered once its batch committed
// and published.
type writeJob struct {
	waiter
	request
}

// maintainJob runs fn in a write transaction of its own (a physical
// compaction step).
type maintainJob struct {
	waiter
	ctx context.Context
	fn  func(ctx context.Context, tx WriteTx) error
}

// syncJob makes the feed include every revision the storage has
// committed so far, and re-reads leases, alarms and the compacted revision
// (a shared storage's other Stores may have changed them).
type syncJob struct{ waiter }

// followJob handles one notice of a shared storage's feed; nobody waits
// for it.
type followJob struct{ n Notice }

// entriesJob applies committed entries of a replicated log.
type entriesJob struct {
	waiter
	ctx      context.Context
	entries  []Entry
	outcomes []Outcome
}

// restoreJob makes the Store follow a storage whose contents a replicated
// log replaced with another node's snapshot.
type restoreJob struct{ waiter }

func (j *writeJob) run(s *Store) { s.writeBatch([]*writeJob{j}) }

func (j *maintainJob) run(s *Store) { j.finish(s.maintainTx(j.fn)) }

func (j *syncJob) run(s *Store) {
	j.finish(s.readLog(s.ctx, 0, ChangedLeases|ChangedAlarms|ChangedCompacted))
}

func (j *followJob) run(s *Store) { s.follow(j.n) }
func (j *followJob) fail(error)   {}

func (j *entriesJob) run(s *Store) {
	var err error
	j.outcomes, err = s.applyEntries(j.entries)
	j.finish(err)
}

func (j *restoreJob) run(s *Store) { j.finish(s.restore(s.ctx)) }

// enqueueWrite queues r for this Store's writer and waits for its answer.
// If ctx ends first the request may still be applied, as with etcd.
func (s *Store) enqueueWrite(ctx context.Context, r *pb.InternalRaftRequest) (proto.Message, error) {
	j := &writeJob{waiter: newWaiter(), request: request{ctx: ctx, req: r}}
	if err := s.enqueue(ctx, j, &j.waiter); err != nil {
		return nil, err
	}
	return j.resp, j.err
}

// maintain runs fn in a write transaction of its own, between batches.
// Only a nil error means fn has finished: after any other the writer may
// still be running it, so its caller must not read what fn writes.
func (s *Store) maintain(ctx context.Context, fn func(ctx context.Context, tx WriteTx) error) error {
	j := &maintainJob{waiter: newWaiter(), ctx: ctx, fn: fn}
	return s.enqueue(ctx, j, &j.waiter)
}

// enqueue queues j and waits until w is finished.
func (s *Store) enqueue(ctx context.Context, j job, w *waiter) error {
	if err := s.send(ctx, j); err != nil {
		return err
	}
	select {
	case <-w.done:
		return w.result
	case <-ctx.Done():
		return ctx.Err()
	case <-s.stopc:
		return ErrClosed
	}
}

// send queues j without waiting for it to run.
func (s *Store) send(ctx context.Context, j job) error {
	select {
	case s.writec <- j:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.stopc:
		return ErrClosed
	}
}

// writeLoop is the single writer. It takes every write waiting (up to
// MaxBatch), applies them in order in one transaction, commits once (one
// fsync for all), publishes the events, then answers. This is group commit:
// throughput comes from sharing the fsync.
func (s *Store) writeLoop() {
	defer s.wg.Done()
	batch := make([]*writeJob, 0, s.cfg.MaxBatch)
	for {
		var next job
		select {
		case <-s.stopc:
			s.drainClosed()
			return
		case next = <-s.writec:
		}
		w, ok := next.(*writeJob)
		if !ok {
			next.run(s)
			continue
		}
		batch = append(batch[:0], w)
		next = nil
	fill:
		for len(batch) < s.cfg.MaxBatch {
			select {
			case j := <-s.writec:
				if w, ok := j.(*writeJob); ok {
					batch = append(batch, w)
					continue
				}
				// Keep queue order: the batch so far, then the job.
				next = j
				break fill
			default:
				break fill
			}
		}
		s.writeBatch(batch)
		if next != nil {
			next.run(s)
		}
	}
}

// drainClosed fails the jobs still queued when the store closes.
func (s *Store) drainClosed() {
	for {
		select {
		case j := <-s.writec:
			j.fail(ErrClosed)
		default:
			return
		}
	}
}

// writeBatch commits a batch of client writes and answers each. A storage
// failure fails every request of the batch that commit did not answer.
func (s *Store) writeBatch(batch []*writeJob) {
	reqs := make([]*request, len(batch))
	for i, j := range batch {
		reqs[i] = &j.request
	}
	if err := s.commit(reqs); err != nil {
		s.log.Error("write batch failed", "requests", len(batch), "err", err)
		for _, r := range reqs {
			if r.resp == nil && r.err == nil {
				r.err = err
			}
		}
	}
	for _, j := range batch {
		close(j.done)
	}
}

// maintainTx runs fn in a write transaction of its own.
func (s *Store) maintainTx(fn func(ctx context.Context, tx WriteTx) error) error {
	return s.retryConflicts(s.ctx, func() error { return s.maintainTxOnce(fn) })
}

func (s *Store) maintainTxOnce(fn func(ctx context.Context, tx WriteTx) error) error {
	if err := s.guard.lost(); err != nil {
		return err
	}
	tx, err := s.b.BeginWrite(s.ctx)
	if err != nil {
		return s.guard.note(fmt.Errorf("begin maintenance: %w", err))
	}
	if err := fn(s.ctx, tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit maintenance: %w", err)
	}
	return nil
}
