package server

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/kite-db/kite/pkg/mvcc"
)

// revisionCompactInterval is how often revision-mode compaction looks at the
// revision (etcd v3compactor's revInterval).
const revisionCompactInterval = 5 * time.Minute

// compactor runs etcd's automatic compaction (v3compactor) against the
// store: periodic mode keeps `period` of history, revision mode keeps the
// last `retention` revisions.
type compactor struct {
	log     *slog.Logger
	compact func(ctx context.Context, rev int64) error
	current func() int64
	// primary reports whether this server runs the storage's once-only jobs:
	// with several servers on one database only that one compacts.
	primary func() bool

	mode      string
	retention time.Duration // a duration (periodic) or a revision count (revision)
	// revInterval is revision mode's polling period (tests shorten it).
	revInterval time.Duration

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// newCompactor returns nil when compaction is off (no mode, or a zero
// retention as etcd treats it).
func newCompactor(log *slog.Logger, store *mvcc.Store, mode string, retention time.Duration) *compactor {
	if mode == "" || retention <= 0 {
		return nil
	}
	return &compactor{
		log: log.With("component", "compactor", "mode", mode),
		compact: func(ctx context.Context, rev int64) error {
			_, err := store.Compact(ctx, &pb.CompactionRequest{Revision: rev})
			return err
		},
		current:     func() int64 { rev, _ := store.Revisions(); return rev },
		primary:     store.Primary,
		mode:        mode,
		retention:   retention,
		revInterval: revisionCompactInterval,
	}
}

// start launches the compaction loop; stop ends it and waits for it.
func (c *compactor) start() {
	if c == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	c.wg.Go(func() {
		switch c.mode {
		case CompactionModePeriodic:
			c.runPeriodic(ctx, c.retention)
		case CompactionModeRevision:
			c.runRevision(ctx, int64(c.retention))
		}
	})
}

func (c *compactor) stop() {
	if c == nil || c.cancel == nil {
		return
	}
	c.cancel()
	c.wg.Wait()
}

// runPeriodic samples the revision every tenth of the period (at most every
// 6 minutes) into a sliding window covering one period, and compacts to the
// oldest sample: the revision current `period` ago. The first compaction
// waits a whole period; later ones happen every min(period, 1h), as in etcd.
func (c *compactor) runPeriodic(ctx context.Context, period time.Duration) {
	interval := min(period, time.Hour) / 10
	retentions := int(period/interval) + 1
	revs := make([]int64, 0, retentions+1)
	var lastRev int64
	lastSuccess := time.Now()
	base := period
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		revs = append(revs, c.current())
		if len(revs) > retentions {
			revs = revs[1:]
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rev := revs[0]
		if time.Since(lastSuccess) < base || rev == lastRev {
			continue
		}
		base = min(period, time.Hour)
		if c.run(ctx, rev, "period", period) {
			lastRev, lastSuccess = rev, time.Now()
		}
	}
}

// runRevision compacts to current-retention every five minutes.
func (c *compactor) runRevision(ctx context.Context, retention int64) {
	var prev int64
	t := time.NewTicker(c.revInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rev := c.current() - retention
		if rev <= 0 || rev == prev {
			continue
		}
		if c.run(ctx, rev, "retention", retention) {
			prev = rev
		}
	}
}

// run compacts to rev and reports success. An already compacted revision
// counts as success (someone compacted further meanwhile).
func (c *compactor) run(ctx context.Context, rev int64, key string, val any) bool {
	if c.primary != nil && !c.primary() {
		return false
	}
	start := time.Now()
	c.log.InfoContext(ctx, "starting auto compaction", "revision", rev, key, val)
	err := c.compact(ctx, rev)
	if err != nil && !errors.Is(err, mvcc.ErrCompacted) {
		if ctx.Err() == nil {
			c.log.WarnContext(ctx, "failed auto compaction", "revision", rev, "error", err)
		}
		return false
	}
	c.log.InfoContext(ctx, "completed auto compaction", "revision", rev, "took", time.Since(start))
	return true
}
