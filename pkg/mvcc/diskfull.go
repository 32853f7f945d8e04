package mvcc

import (
	"errors"
	"strings"
	"syscall"
	"time"
)

// diskFullWarnEvery bounds how often a full disk is logged: every write
// fails alike until space is freed.
const diskFullWarnEvery = 10 * time.Second

// isDiskFull reports whether a storage error means the disk (or the
// database server's) is full: ENOSPC, SQLite's SQLITE_FULL ("database or
// disk is full"), or Postgres' disk_full (SQLSTATE 53100).
func isDiskFull(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, syscall.ENOSPC) {
		return true
	}
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "disk is full") || strings.Contains(msg, "no space left on device") ||
		strings.Contains(msg, "sqlstate 53100")
}

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
