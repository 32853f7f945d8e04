package memtail

import (
	"context"
	"fmt"
)

// Sync flushes every committed batch into the base and syncs the base.
// It is for a caller whose own log feeds this Backend (raftsql's WAL, with
// no Options.LogDir): everything up to AppliedIndex is then durable in the
// base, and that log may drop its entries up to there.
func (b *Backend) Sync() error {
	if err := b.flush(context.Background()); err != nil {
		return err
	}
	if err := b.base.Sync(); err != nil {
		return fmt.Errorf("memtail: sync the storage: %w", err)
	}
	return nil
}
