package mvcc

import (
	"context"
	"fmt"
)

// copyChunk bounds the log rows Copy holds in memory at once.
const copyChunk = 4096

// Copy writes the whole state of src into dst: every row of the log in
// (revision, sub-revision) order, the leases, the alarms and the current and
// compacted revisions. dst must be empty; the caller commits it. Revisions
// are preserved exactly, so a copy answers every read at every revision the
// source could still answer, whatever storage either side is. It serves
// snapshots of a storage that is not a single file (postgres) and copies
// between storages.
func Copy(ctx context.Context, dst WriteTx, src ReadTx) error {
	current, compacted, err := src.Revisions(ctx)
	if err != nil {
		return fmt.Errorf("copy: read revisions: %w", err)
	}
	for from := int64(1); from <= current; {
		rows, err := src.Changes(ctx, from, current, copyChunk, false)
		if err != nil {
			return fmt.Errorf("copy: read log from revision %d: %w", from, err)
		}
		if len(rows) == copyChunk {
			// The chunk may end inside a revision: copy the whole revisions
			// and read the partial one again.
			last := rows[len(rows)-1].KV.ModRevision
			if whole := wholeRevisions(rows, last); len(whole) > 0 {
				rows = whole
				from = last
			} else {
				// One revision larger than a chunk: read it alone.
				if rows, err = src.Changes(ctx, last, last, 0, false); err != nil {
					return fmt.Errorf("copy: read revision %d: %w", last, err)
				}
				from = last + 1
			}
		} else {
			from = current + 1
		}
		if err := copyRows(ctx, dst, rows); err != nil {
			return err
		}
	}
	leases, err := src.Leases(ctx)
	if err != nil {
		return fmt.Errorf("copy: read leases: %w", err)
	}
	for _, l := range leases {
		if err := dst.PutLease(ctx, l); err != nil {
			return fmt.Errorf("copy: lease %d: %w", l.ID, err)
		}
	}
	alarms, err := src.Alarms(ctx)
	if err != nil {
		return fmt.Errorf("copy: read alarms: %w", err)
	}
	for _, a := range alarms {
		if err := dst.PutAlarm(ctx, a); err != nil {
			return fmt.Errorf("copy: alarm %v: %w", a, err)
		}
	}
	if err := dst.SetRevisions(ctx, current, compacted); err != nil {
		return fmt.Errorf("copy: set revisions: %w", err)
	}
	return nil
}

// wholeRevisions drops the rows of revision last from the end of rows.
func wholeRevisions(rows []Change, last int64) []Change {
	n := len(rows)
	for n > 0 && rows[n-1].KV.ModRevision == last {
		n--
	}
	return rows[:n]
}

func copyRows(ctx context.Context, dst WriteTx, rows []Change) error {
	for _, c := range rows {
		var err error
		if c.Deleted {
			err = dst.Delete(ctx, c.KV.Key, c.KV.ModRevision, c.Sub)
		} else {
			err = dst.Put(ctx, c.KV, c.Sub)
		}
		if err != nil {
			return fmt.Errorf("copy: row %d/%d of %q: %w", c.KV.ModRevision, c.Sub, c.KV.Key, err)
		}
	}
	return nil
}
