package mvcc

import (
	"context"
	"fmt"
)

// logChunk bounds the log rows a walk over the log holds in memory at once.
const logChunk = 4096

// eachChunk walks the log rows of revisions from..to of tx in (revision,
// sub-revision) order and hands them to fn in chunks of about logChunk rows
// that never split a revision: HashKV, Copy and a shared storage's feed all
// need whole revisions (a revision is hashed, copied or published at once).
// A revision larger than a chunk is read alone.
func eachChunk(ctx context.Context, tx ReadTx, from, to int64, withPrev bool, fn func(rows []Change) error) error {
	for from <= to {
		rows, err := tx.Changes(ctx, from, to, logChunk, withPrev)
		if err != nil {
			return fmt.Errorf("read revisions %d-%d: %w", from, to, err)
		}
		next := to + 1
		if len(rows) == logChunk {
			// The chunk may end inside a revision: hand over the whole
			// revisions and read the partial one again.
			last := rows[len(rows)-1].KV.ModRevision
			n := len(rows)
			for n > 0 && rows[n-1].KV.ModRevision == last {
				n--
			}
			if n > 0 {
				rows, next = rows[:n], last
			} else if rows, err = tx.Changes(ctx, last, last, 0, withPrev); err != nil {
				return fmt.Errorf("read revision %d: %w", last, err)
			} else {
				next = last + 1
			}
		}
		if err := fn(rows); err != nil {
			return err
		}
		from = next
	}
	return nil
}
