package pgtest

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// Freeze stops every process of the running cluster with SIGSTOP: the
// kernel still accepts its connections, but nothing answers, as when a
// network drops every packet or the database machine hangs. Thaw, or the
// end of the test, resumes it.
func (c *Cluster) Freeze(t testing.TB) {
	t.Helper()
	c.signalAll(t, syscall.SIGSTOP)
	t.Cleanup(func() { c.signalAll(t, syscall.SIGCONT) })
}

// Thaw resumes a frozen cluster.
func (c *Cluster) Thaw(t testing.TB) {
	t.Helper()
	c.signalAll(t, syscall.SIGCONT)
}

// signalAll signals the postmaster (the first line of postmaster.pid) and
// every process whose parent it is: its backends and auxiliary processes.
func (c *Cluster) signalAll(t testing.TB, sig syscall.Signal) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(c.Dir, "postmaster.pid"))
	if err != nil {
		t.Fatalf("pgtest: postmaster.pid: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(data), "\n", 2)[0]))
	if err != nil {
		t.Fatalf("pgtest: postmaster.pid: %v", err)
	}
	pids := []int{pid}
	procs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range procs {
		stat, err := os.ReadFile(p)
		if err != nil {
			continue // exited meanwhile
		}
		// pid (comm) state ppid ...; comm may hold spaces, so read after ')'.
		i := strings.LastIndexByte(string(stat), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat)[i+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			if child, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil {
				pids = append(pids, child)
			}
		}
	}
	for _, p := range pids {
		_ = syscall.Kill(p, sig)
	}
}
