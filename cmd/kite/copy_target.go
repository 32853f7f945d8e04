package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/kite-db/kite/pkg/mvcc"
)

// errNotEmpty is returned for a non-empty target without --force.
var errNotEmpty = errors.New("not empty")

// prepareTarget refuses a target that holds anything, or with force
// empties it, inside the copy's write transaction.
func prepareTarget(ctx context.Context, tx mvcc.WriteTx, force bool) error {
	st, err := targetState(ctx, tx)
	if err != nil {
		return err
	}
	if st.empty() {
		return nil
	}
	if !force {
		return fmt.Errorf("%w (%s); refusing to overwrite it: pass --force to replace its contents", errNotEmpty, st)
	}
	if err := emptyTarget(ctx, tx, st); err != nil {
		return fmt.Errorf("empty it (--force): %w", err)
	}
	if st, err = targetState(ctx, tx); err != nil {
		return err
	}
	if !st.empty() {
		return fmt.Errorf("still not empty after emptying it (--force): %s", st)
	}
	return nil
}

type targetContents struct {
	current, compacted int64
	keys               int64
	rows               bool // any log row, history included
	leases, alarms     int
}

func (s targetContents) empty() bool {
	return s.current <= 1 && s.compacted == 0 && s.keys == 0 && !s.rows && s.leases == 0 && s.alarms == 0
}

func (s targetContents) String() string {
	return fmt.Sprintf("revision %d, compacted %d, %d keys, %d leases, %d alarms", s.current, s.compacted, s.keys, s.leases, s.alarms)
}

func targetState(ctx context.Context, tx mvcc.ReadTx) (targetContents, error) {
	var s targetContents
	var err error
	if s.current, s.compacted, err = tx.Revisions(ctx); err != nil {
		return s, fmt.Errorf("read revisions: %w", err)
	}
	if s.keys, err = tx.Count(ctx, []byte{0}, []byte{0}, max(s.current, 1)); err != nil {
		return s, fmt.Errorf("count keys: %w", err)
	}
	// Any row at any revision, even above the stored one, makes the
	// target non-empty.
	rows, err := tx.Changes(ctx, 0, math.MaxInt64, 1, false)
	if err != nil {
		return s, fmt.Errorf("read log: %w", err)
	}
	s.rows = len(rows) > 0
	leases, err := tx.Leases(ctx)
	if err != nil {
		return s, fmt.Errorf("read leases: %w", err)
	}
	alarms, err := tx.Alarms(ctx)
	if err != nil {
		return s, fmt.Errorf("read alarms: %w", err)
	}
	s.leases, s.alarms = len(leases), len(alarms)
	return s, nil
}

// maxSubs is the most rows one revision may hold in every driver (SQLite
// numbers a row rev<<20 | sub).
const maxSubs = 1 << 20

// emptyTarget removes everything from the target with the Backend's own
// write calls: a tombstone for every live key above every stored revision,
// then a compaction at that revision, which removes every row (each one is
// a tombstone or superseded), then the leases, alarms and revisions. It
// runs in the copy's transaction, so nothing of it is visible unless the
// copy commits.
func emptyTarget(ctx context.Context, tx mvcc.WriteTx, st targetContents) error {
	// The newest stored row may be above the stored revision only in a
	// damaged database; start above both.
	last, err := lastLogRevision(ctx, tx, st.current)
	if err != nil {
		return err
	}
	rev, sub := max(st.current, last)+1, int64(0)
	start := []byte{0}
	for {
		// Read at the stored revision: the tombstones written above it do
		// not change what this read sees, so the pages stay stable.
		kvs, err := tx.Range(ctx, start, []byte{0}, max(st.current, 1), copyPage, true)
		if err != nil {
			return fmt.Errorf("list keys: %w", err)
		}
		for _, kv := range kvs {
			if sub == maxSubs {
				rev, sub = rev+1, 0
			}
			if err := tx.Delete(ctx, kv.Key, rev, sub); err != nil {
				return fmt.Errorf("delete %q: %w", kv.Key, err)
			}
			sub++
		}
		if len(kvs) < copyPage {
			break
		}
		start = append(slices.Clone(kvs[len(kvs)-1].Key), 0)
	}
	// Compaction in bounded steps, so no single statement walks the whole
	// log at once.
	const step = 10000
	for from := int64(0); from <= rev; from += step {
		if _, err := tx.CompactBatch(ctx, rev, from, min(from+step-1, rev)); err != nil {
			return fmt.Errorf("remove log rows: %w", err)
		}
	}
	leases, err := tx.Leases(ctx)
	if err != nil {
		return fmt.Errorf("read leases: %w", err)
	}
	for _, l := range leases {
		if err := tx.DeleteLease(ctx, l.ID); err != nil {
			return fmt.Errorf("delete lease %x: %w", l.ID, err)
		}
	}
	alarms, err := tx.Alarms(ctx)
	if err != nil {
		return fmt.Errorf("read alarms: %w", err)
	}
	for _, a := range alarms {
		if err := tx.DeleteAlarm(ctx, a); err != nil {
			return fmt.Errorf("delete alarm: %w", err)
		}
	}
	if err := tx.SetRevisions(ctx, 0, 0); err != nil {
		return fmt.Errorf("reset revisions: %w", err)
	}
	return nil
}

// lastLogRevision returns the revision of the newest log row, at least
// current: the log is read in chunks from current on (normally empty).
func lastLogRevision(ctx context.Context, tx mvcc.ReadTx, current int64) (int64, error) {
	last := current
	for {
		rows, err := tx.Changes(ctx, last+1, math.MaxInt64, copyPage, false)
		if err != nil {
			return 0, fmt.Errorf("read log: %w", err)
		}
		if len(rows) == 0 {
			return last, nil
		}
		last = rows[len(rows)-1].KV.ModRevision
	}
}

// copyPage bounds the keys read at once by the verification and by
// emptying a target.
const copyPage = 1000
