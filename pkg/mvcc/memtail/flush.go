package memtail

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kite-db/kite/pkg/mvcc"
)

// flushLoop flushes the tail when its oldest batch has waited
// FlushInterval, or when it grew past FlushOps, until Close.
func (b *Backend) flushLoop() {
	defer b.wg.Done()
	ticker := time.NewTicker(b.opts.FlushInterval)
	defer ticker.Stop()
	lastRelease := time.Now()
	for {
		select {
		case <-b.stop:
			return
		case <-ticker.C:
		case <-b.kick:
		}
		if err := b.flush(context.Background()); err != nil {
			b.log.Error("flush of committed writes into the storage failed; writes are refused until a flush succeeds", "err", err)
			continue
		}
		if b.wal != nil && time.Since(lastRelease) >= b.opts.ReleaseInterval {
			lastRelease = time.Now()
			if err := b.release(false); err != nil {
				b.log.Warn("syncing the storage to release the log failed; the log keeps growing until it succeeds", "err", err)
			}
		}
	}
}

// release syncs the base and lets the log drop what the base now holds
// durably. Without force it does nothing when nothing was flushed since
// the last release.
func (b *Backend) release(force bool) error {
	b.mu.Lock()
	flushed, released := b.flushed, b.released
	b.mu.Unlock()
	if flushed == released && !force {
		return nil
	}
	if err := b.base.Sync(); err != nil {
		return fmt.Errorf("memtail: sync the storage: %w", err)
	}
	if err := b.wal.release(flushed); err != nil {
		return err
	}
	b.mu.Lock()
	b.released = flushed
	b.mu.Unlock()
	return nil
}

// flush moves every batch committed so far into the base in one
// transaction and drops it from the tail. A failed flush rolls back and
// leaves the tail as it was, so it is tried again; until one succeeds,
// writes are refused with its error (a full disk fails writes, as it did
// before the tail existed, and they succeed again once space is freed).
func (b *Backend) flush(ctx context.Context) error {
	b.flushMu.Lock()
	defer b.flushMu.Unlock()
	b.mu.Lock()
	tail, failed := b.tail, b.failed
	b.mu.Unlock()
	if failed != nil {
		return failed
	}
	if len(tail) == 0 {
		return nil
	}
	tx, err := b.base.BeginAppliedWrite(ctx)
	if err == nil {
		err = b.apply(ctx, tx, tail)
	}
	if err != nil {
		err = fmt.Errorf("memtail: flush of batches %d-%d: %w", tail[0].index, tail[len(tail)-1].index, err)
		b.mu.Lock()
		b.flushErr = err
		b.mu.Unlock()
		if b.opts.FlushFailed != nil {
			b.opts.FlushFailed(err)
		}
		return err
	}
	b.mu.Lock()
	ops := 0
	for _, bt := range tail {
		ops += len(bt.ops)
	}
	// Batches committed during the flush stay; the slice is new, so reads
	// holding the old one keep what they merge.
	b.tail = append([]*batch(nil), b.tail[len(tail):]...)
	b.tailOps -= ops
	b.flushed = tail[len(tail)-1].index
	b.flushErr = nil
	b.mu.Unlock()
	return nil
}

// apply replays batches into tx, records the newest batch's index and
// commits; on failure it rolls back.
func (b *Backend) apply(ctx context.Context, tx mvcc.AppliedWriteTx, batches []*batch) error {
	for _, bt := range batches {
		for i := range bt.ops {
			if err := bt.ops[i].replay(ctx, tx); err != nil {
				return errors.Join(err, tx.Rollback())
			}
		}
	}
	return commitAt(ctx, tx, batches[len(batches)-1].index)
}

// commitAt records index as tx's applied index and commits tx; on failure
// it rolls back.
func commitAt(ctx context.Context, tx mvcc.AppliedWriteTx, index uint64) error {
	if err := tx.SetAppliedIndex(ctx, index); err != nil {
		return errors.Join(err, tx.Rollback())
	}
	return tx.Commit()
}
