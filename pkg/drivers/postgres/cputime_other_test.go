//go:build !unix

package postgres_test

import "time"

// processCPU is not measured here: see cputime_unix_test.go.
func processCPU() (time.Duration, bool) { return 0, false }
