package testenv

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestMain lets a test start the reference etcd as a process of its own,
// as the load tools do: the test binary re-executed with EtcdServerCommand.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == EtcdServerCommand {
		os.Exit(RunEtcdServer("testenv", os.Args[2:]))
	}
	os.Exit(m.Run())
}

// TestStartClusterRaft bootstraps a raft cluster of three reference etcd
// processes, reads each one's CPU and memory, kills one, sees it named as
// exited, restarts it and sees it counted as restarted.
func TestStartClusterRaft(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three etcd processes")
	}
	self, err := EtcdServerBinary()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := StartCluster(ctx, slog.New(slog.DiscardHandler), ClusterSpec{
		Name: "etcd", Members: 3, WorkDir: t.TempDir(), DirPrefix: "testenv-", TokenPrefix: "testenv-",
		Argv:        func(m Member) []string { return EtcdArgv(self, m) },
		StartupWait: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	if got := c.Names(); !slices.Equal(got, []string{"etcd-0", "etcd-1", "etcd-2"}) {
		t.Errorf("Names = %q", got)
	}
	if eps := c.Endpoints(); len(eps) != 3 || !strings.HasPrefix(eps[0], "http://127.0.0.1:") {
		t.Errorf("Endpoints = %q", eps)
	}
	argv := strings.Join(c.Servers[1].Argv, " ")
	if !strings.Contains(argv, "--initial-cluster etcd-0=http://127.0.0.1:") || !strings.Contains(argv, "--initial-cluster-token testenv-etcd-") {
		t.Errorf("member argv %q: want the three peers and the cluster's token", argv)
	}
	rss, err := c.RSS()
	if err != nil || len(rss) != 3 || Sum(rss) <= 0 {
		t.Errorf("RSS = %v, %v", rss, err)
	}
	peak, err := c.PeakRSS()
	if err != nil || len(peak) != 3 || peak[0] < rss[0] {
		t.Errorf("PeakRSS = %v, %v; want at least RSS %v", peak, err, rss)
	}
	if cpu, err := c.CPUSeconds(); err != nil || len(cpu) != 3 {
		t.Errorf("CPUSeconds = %v, %v", cpu, err)
	}
	if err := c.Exited(); err != nil {
		t.Fatalf("Exited = %v before any exit", err)
	}

	c.Servers[2].Kill()
	if err := c.Exited(); err == nil || !strings.Contains(err.Error(), "etcd-2 exited") {
		t.Errorf("Exited = %v; want etcd-2 named", err)
	}
	if err := c.RestartExited(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := c.Exited(); err != nil {
		t.Errorf("Exited = %v after the restart", err)
	}
	if got := c.Restarted(); !slices.Equal(got, []string{"etcd-2"}) {
		t.Errorf("Restarted = %q; want etcd-2", got)
	}
	dir := c.Servers[0].Dir
	c.Stop()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s after Stop: %v; want it removed", dir, err)
	}
}
