package mvcc

import (
	"context"
	"fmt"
)

// Copy writes the whole state of src into dst: every row of the log in
// (revision, sub-revision) order, the leases, the alarms, the authentication
// state (users, roles, enabled; when src has one) and the current and
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
	err = eachChunk(ctx, src, 1, current, false, func(rows []Change) error {
		return copyRows(ctx, dst, rows)
	})
	if err != nil {
		return fmt.Errorf("copy: %w", err)
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
	auth, err := src.AuthState(ctx)
	if err != nil {
		return fmt.Errorf("copy: read auth state: %w", err)
	}
	if auth != nil {
		if err := dst.PutAuthState(ctx, auth); err != nil {
			return fmt.Errorf("copy: auth state: %w", err)
		}
	}
	if err := dst.SetRevisions(ctx, current, compacted); err != nil {
		return fmt.Errorf("copy: set revisions: %w", err)
	}
	return nil
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
