package sqlite

import (
	"errors"
	"fmt"
	"syscall"

	modernc "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/kite-db/kite/pkg/mvcc"
)

// classify marks an error of SQLite with the store's sentinel for its
// cause, so the store recognises it by errors.Is rather than by SQLite's
// text: a full disk (SQLITE_FULL, or ENOSPC from a file operation) is
// mvcc.ErrDiskFull. Other errors are returned as they are.
func classify(err error) error {
	if err == nil || errors.Is(err, mvcc.ErrDiskFull) {
		return err
	}
	var se *modernc.Error
	// The low byte is the primary result code; extended codes add bits
	// above it.
	if (errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_FULL) || errors.Is(err, syscall.ENOSPC) {
		return fmt.Errorf("%w: %w", mvcc.ErrDiskFull, err)
	}
	return err
}
