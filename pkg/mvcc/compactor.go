package mvcc

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// compactor removes the rows a compaction made unreadable. The Compact
// request itself only moves the compacted revision (reads below it fail from
// then on); the physical removal walks the revisions up to it in steps of
// CompactBatchRevisions, each step a short write transaction queued between
// client batches, so writers are never blocked for long. Rows not yet removed
// are harmless: nothing can read below the compacted revision.
type compactor struct {
	s    *Store
	step int64

	mu     sync.Mutex // guards the fields below
	target int64      // newest compacted revision to reach
	done   int64      // revisions <= done are physically compacted
	wake   chan struct{}
	// waiters are closed when done reaches their revision.
	waiters map[int64][]chan struct{}
}

func newCompactor(s *Store, step int64) *compactor {
	return &compactor{s: s, step: step, wake: make(chan struct{}, 1), waiters: map[int64][]chan struct{}{}}
}

// notify records a new compacted revision.
func (c *compactor) notify(rev int64) {
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
func (c *compactor) wait(ctx context.Context, rev int64) error {
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
func (c *compactor) loop(ctx context.Context) {
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
// first stored row at or after from, and returns where the next step starts.
func (c *compactor) stepFrom(ctx context.Context, target, from int64) (int64, error) {
	next := target + 1
	err := c.s.maintain(ctx, func(ctx context.Context, tx WriteTx) error {
		rows, err := tx.Changes(ctx, from, target, 1, false)
		if err != nil {
			return fmt.Errorf("find next row: %w", err)
		}
		if len(rows) == 0 {
			return nil
		}
		start := rows[0].KV.ModRevision
		end := min(start+c.step-1, target)
		if _, err := tx.CompactBatch(ctx, target, start, end); err != nil {
			return fmt.Errorf("compact revisions %d-%d: %w", start, end, err)
		}
		next = end + 1
		return nil
	})
	return next, err
}

func (c *compactor) advance(to int64) {
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
