package mvcc

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// physicalCompactor removes the rows a compaction made unreadable. The Compact
// request itself only moves the compacted revision (reads below it fail from
// then on); the physical removal walks the revisions up to it in steps, each
// step a short write transaction queued between client batches, so writers
// are never blocked for long. Rows not yet removed are harmless: nothing can
// read below the compacted revision.
//
// A step holds the writer while it runs, so a client write that arrives
// meanwhile waits for it. How long a step of N revisions takes depends on
// how many rows they hold and how large those are: on kube-apiserver's churn
// a step of 1,000 revisions took 30-85 ms, above the 50 ms a compaction may
// add to a write. The step size therefore follows the measured time: each
// step aims at stepTarget, between minCompactStep and maxStep revisions.
type physicalCompactor struct {
	s       *Store
	maxStep int64
	step    int64 // the next step's revisions; set by loop between steps, read by the step it sizes

	mu     sync.Mutex // guards the fields below
	target int64      // newest compacted revision to reach
	done   int64      // revisions <= done are physically compacted
	wake   chan struct{}
	// waiters are closed when done reaches their revision.
	waiters map[int64][]chan struct{}
}

// stepTarget is the time one compaction step may hold the writer,
// statements and commit: a write queued behind it waits about that long.
const stepTarget = 10 * time.Millisecond

// minCompactStep keeps a walk over dense history from taking one step per
// handful of revisions when single steps are slow for another reason (a
// slow fsync on a busy disk).
const minCompactStep = 16

func newPhysicalCompactor(s *Store, maxStep int64) *physicalCompactor {
	return &physicalCompactor{s: s, maxStep: maxStep, step: min(maxStep, 128),
		wake: make(chan struct{}, 1), waiters: map[int64][]chan struct{}{}}
}

// nextStep sizes the step after one of step revisions that held the
// writer for held: in proportion to stepTarget/held, at most twice or a
// quarter of the last one, so one slow fsync does not collapse it.
func nextStep(step int64, held time.Duration, maxStep int64) int64 {
	next := 2 * step
	if held > 0 {
		next = min(next, int64(float64(step)*float64(stepTarget)/float64(held)))
	}
	next = max(next, step/4, minCompactStep)
	return min(next, maxStep)
}

// notify records a new compacted revision.
func (c *physicalCompactor) notify(rev int64) {
	c.mu.Lock()
	if rev > c.target {
		c.target = rev
	}
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// wait blocks until revisions <= rev are physically compacted.
func (c *physicalCompactor) wait(ctx context.Context, rev int64) error {
	c.mu.Lock()
	if c.done >= rev {
		c.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	c.waiters[rev] = append(c.waiters[rev], ch)
	c.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// loop walks the log from its oldest row up to the newest target. A new
// target restarts the walk from the bottom: rows kept by an earlier compaction
// (the newest version of each key at that revision) may be superseded at the
// new one. Each step first finds the next stored row, so sparse stretches of
// history cost one index probe, not one step per revision.
func (c *physicalCompactor) loop(ctx context.Context) {
	defer c.s.wg.Done()
	// The target of the current walk and its cursor; nothing to walk yet.
	walk, from := int64(0), int64(1)
	for {
		c.mu.Lock()
		target, done := c.target, c.done
		c.mu.Unlock()
		if target != walk {
			walk, from = target, 1
		}
		if from > walk {
			if done < walk {
				c.advance(walk)
			}
			select {
			case <-ctx.Done():
				return
			case <-c.wake:
			}
			continue
		}
		next, err := c.stepFrom(ctx, walk, from)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			c.s.log.Warn("physical compaction step failed", "from", from, "target", walk, "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		from = next
	}
}

// stepFrom compacts one step of at most c.step revisions starting at the
// first stored row at or after from, returns where the next step starts,
// and sizes the next step by how long this one held the writer.
func (c *physicalCompactor) stepFrom(ctx context.Context, target, from int64) (int64, error) {
	next := target + 1
	var start, removed int64
	var began time.Time
	err := c.s.maintain(ctx, func(ctx context.Context, tx WriteTx) error {
		began = time.Now()
		rows, err := tx.Changes(ctx, from, target, 1, false)
		if err != nil {
			return fmt.Errorf("find next row: %w", err)
		}
		if len(rows) == 0 {
			return nil
		}
		start = rows[0].KV.ModRevision
		end := min(start+c.step-1, target)
		if removed, err = tx.CompactBatch(ctx, target, start, end); err != nil {
			return fmt.Errorf("compact revisions %d-%d: %w", start, end, err)
		}
		next = end + 1
		return nil
	})
	if err != nil {
		// The writer may still be running fn (the wait ended with ctx or
		// Close): what fn writes is not ours to read.
		return 0, err
	}
	if start > 0 {
		// From the step's first statement to the end of its commit: what
		// a write queued behind it waits.
		held := time.Since(began)
		c.s.log.Debug("physical compaction step", "from", start, "to", next-1, "target", target,
			"revisions", c.step, "rows_removed", removed, "held", held)
		if next <= target {
			c.step = nextStep(c.step, held, c.maxStep)
		}
	}
	return next, nil
}

func (c *physicalCompactor) advance(to int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done = to
	for rev, chs := range c.waiters {
		if rev <= to {
			for _, ch := range chs {
				close(ch)
			}
			delete(c.waiters, rev)
		}
	}
}
