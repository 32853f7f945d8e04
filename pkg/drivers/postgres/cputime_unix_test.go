//go:build unix

package postgres_test

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time (user and system) this process has used.
// Benchmarks report it per operation because their wall time includes the
// Postgres server's work on the same machine.
func processCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
