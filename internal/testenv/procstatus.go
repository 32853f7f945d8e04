package testenv

import (
	"bufio"
	"errors"
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

// CPUSeconds is the user and system CPU a process has used, utime+stime of
// /proc/PID/stat in seconds. Linux reports them in clock ticks of USER_HZ,
// which is 100 on every architecture Go's linux ports run on.
func CPUSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("read cpu of pid %d: %w", pid, err)
	}
	// The command name (field 2) may hold spaces and parentheses; the
	// fields after its last ")" are the state (field 3) onwards.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, fmt.Errorf("parse /proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("parse /proc/%d/stat: %d fields", pid, len(f))
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("parse /proc/%d/stat: %w", pid, err)
	}
	return float64(utime+stime) / 100, nil
}
