//go:build unix

package server

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// LockDataDir takes an exclusive advisory lock on DataDir/kite.lock so that
// two kite processes never serve (or `kite copy` never writes) the same
// database: each would number its
// own revisions and the log would fork (etcd locks its WAL for the same
// reason). The lock dies with the process, so a crash never leaves it stale.
func LockDataDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, "kite.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("data dir %s is in use by another kite process", dir)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return f, nil
}
