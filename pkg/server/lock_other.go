//go:build !unix

package server

import "os"

// LockDataDir is a no-op where flock is unavailable.
func LockDataDir(dir string) (*os.File, error) { return nil, nil }
