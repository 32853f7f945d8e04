package mvcc

import (
	"errors"
	"time"
)

// diskFullWarnEvery bounds how often a full disk is logged: every write
// fails alike until space is freed.
const diskFullWarnEvery = 10 * time.Second

// isDiskFull reports whether a storage error means the disk (or the
// database server's) is full: the drivers wrap such errors with
// ErrDiskFull, each from its database's own error code.
func isDiskFull(err error) bool { return errors.Is(err, ErrDiskFull) }

// warnDiskFull logs, at most every diskFullWarnEvery, that writes fail
// because the disk is full, so an operator sees the cause rather than
// only the clients' errors. Called on the writer's goroutine.
func (s *Store) warnDiskFull(err error) {
	if !isDiskFull(err) {
		return
	}
	if now := time.Now(); now.Sub(s.diskFullWarned) >= diskFullWarnEvery {
		s.diskFullWarned = now
		s.log.Error("the disk is full: writes fail until space is freed (compact and defragment, or add space)", "err", err)
	}
}
