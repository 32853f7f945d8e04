package testenv

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Fields of /proc/PID/status, in kB.
const (
	StatusRSS     = "VmRSS" // resident memory now
	StatusPeakRSS = "VmHWM" // the most resident memory since the process started
)

// StatusBytes reads field (StatusRSS, StatusPeakRSS) of the process's
// /proc/PID/status, in bytes.
func StatusBytes(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("read memory of pid %d: %w", pid, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parse %s %q: %w", field, rest, err)
			}
			return kb * 1024, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("read memory of pid %d: %w", pid, err)
	}
	return 0, fmt.Errorf("no %s for pid %d", field, pid)
}
