package test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// TestFsyncAudit counts, with strace attached to a running kite, every
// fsync and fdatasync it makes under 16 concurrent writers, by file, and
// holds it to about one sync per durable write batch:
//   - the commit log (SQLite's WAL in sqlite mode, kite's own log with
//     --experimental-sqlite-log-commit, the raft WAL in raftsql) is synced
//     at most once per batch, and concurrent writers share those syncs;
//   - everything else (the database file at a checkpoint, SQLite behind a
//     log) is synced rarely, not once per apply.
//
// A batch is what must be durable before an acknowledgement: a SQLite
// commit or a kite log append (etcd_disk_backend_commit_duration_seconds
// counts them) or, in raftsql, a raft entry (its applied index counts
// them; etcd's WAL syncs once for all the entries of a Ready). In postgres
// and mysql modes the database server makes writes durable, not kite:
// nothing of kite's to audit.
func TestFsyncAudit(t *testing.T) {
	if againstEtcd {
		t.Skip("the audit traces kite's own process")
	}
	strace, err := exec.LookPath("strace")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("strace is needed for the fsync audit (.ci/run installs it): %v", err)
		}
		t.Skipf("strace not found: %v", err)
	}
	switch datastore {
	case "sqlite":
		for _, tc := range []struct {
			name  string
			flags []string
			log   string // the commit log's file names end so
		}{
			{"SQLite commit", nil, "kite.db-wal"},
			{"kite log commit", []string{"--experimental-sqlite-log-commit"}, ".log"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				metrics := "http://127.0.0.1:" + strconv.Itoa(freePort(t))
				k := startKiteIn(t, t.TempDir(), append(tc.flags, "--listen-metrics-urls", metrics)...)
				auditSyncs(t, strace, k, []*kiteProcess{k}, metrics, commits, tc.log)
			})
		}
	case "raftsql", "raftsql-restored":
		var metrics []string
		for _, p := range freePorts(t, 3) {
			metrics = append(metrics, "http://127.0.0.1:"+strconv.Itoa(p))
		}
		c := startClusterOf(t, 3, &cluster{perMember: func(i int) []string {
			return []string{"--listen-metrics-urls", metrics[i]}
		}})
		l := c.leaderIndex(t)
		for _, i := range []int{l, c.others(l)[0]} {
			role := "leader"
			if i != l {
				role = "follower"
			}
			t.Run(role, func(t *testing.T) {
				auditSyncs(t, strace, c.members[i].kiteProcess, c.procs(l), metrics[i], raftEntries, ".wal")
			})
		}
	default:
		t.Skipf("in %s mode the database server makes writes durable, not kite", datastore)
	}
}

// A batch counter reads, from a scrape of /metrics, how many write
// batches kite has made durable.
type batchCounter struct {
	name  string
	count func(ms map[string]*dto.MetricFamily) uint64
}

var (
	// commits: one per SQLite commit or kite log append that acknowledges
	// writes.
	commits = batchCounter{"backend commits", func(ms map[string]*dto.MetricFamily) uint64 {
		return histCount(ms, "etcd_disk_backend_commit_duration_seconds")
	}}
	// raftEntries: a raftsql member's applied raft index, one entry per
	// proposed write batch (and the rare empty or configuration entry).
	raftEntries = batchCounter{"raft entries", func(ms map[string]*dto.MetricFamily) uint64 {
		return uint64(value(ms, "etcd_server_proposals_applied_total"))
	}}
)

// syncCall matches a sync in strace's output (-y: the fd's path).
var syncCall = regexp.MustCompile(`\b(fsync|fdatasync)\(\d+<([^>]*)>\)`)

// auditSyncs traces k's syncs while 16 writers put through writeTo; the
// names of k's commit log files end in logSuffix.
func auditSyncs(t *testing.T, strace string, k *kiteProcess, writeTo []*kiteProcess, metrics string, counter batchCounter, logSuffix string) {
	out := filepath.Join(t.TempDir(), "strace.out")
	cmd := exec.Command(strace, "-f", "-y", "-e", "trace=fsync,fdatasync", "-o", out, "-p", strconv.Itoa(k.proc.Pid()))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("strace: %v", err)
	}
	detached := false
	detach := func() {
		if !detached {
			detached = true
			_ = cmd.Process.Signal(syscall.SIGINT) // strace detaches and exits
			_ = cmd.Wait()
		}
	}
	t.Cleanup(detach)
	// strace says once it has attached to every thread of the process.
	attached := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "attached") {
				attached <- nil
				break
			}
		}
		for sc.Scan() {
		}
		attached <- fmt.Errorf("strace ended: %v", sc.Err())
	}()
	select {
	case err := <-attached:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("strace did not attach")
	}

	before := scrape(t, metrics)
	const writers, puts = 16, 150
	ctx := testCtx(t, 3*time.Minute)
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for i := range writers {
		c := writeTo[i%len(writeTo)].Client
		wg.Go(func() {
			for n := range puts {
				if _, err := c.Put(ctx, fmt.Sprintf("/audit/w%02d/k%04d", i, n), strings.Repeat("v", 256)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("put: %v", err)
	}
	after := scrape(t, metrics)
	detach()
	batches := counter.count(after) - counter.count(before)
	applies := commits.count(after) - commits.count(before)

	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	byFile := map[string]int{}
	var logSyncs, otherSyncs uint64
	for _, m := range syncCall.FindAllStringSubmatch(string(data), -1) {
		name := filepath.Base(m[2])
		byFile[name]++
		if strings.HasSuffix(name, logSuffix) {
			logSyncs++
		} else {
			otherSyncs++
		}
	}
	const writes = writers * puts
	t.Logf("%d puts from %d writers: %d batches (%s), %d backend commits; %d syncs of the commit log (%.2f a batch, %.1f puts a sync), %d others: %v",
		writes, writers, batches, counter.name, applies, logSyncs, float64(logSyncs)/float64(max(batches, 1)),
		float64(writes)/float64(max(logSyncs, 1)), otherSyncs, byFile)
	if batches == 0 || logSyncs == 0 {
		t.Fatalf("nothing to audit: %d batches (%s), %d syncs of the commit log", batches, counter.name, logSyncs)
	}
	// Room for the syncs a checkpoint makes of SQLite's WAL.
	if limit := batches + batches/8 + 10; logSyncs > limit {
		t.Errorf("%d syncs of the commit log for %d batches: more than one a batch (limit %d)", logSyncs, batches, limit)
	}
	if limit := applies/8 + 10; otherSyncs > limit {
		t.Errorf("%d syncs of other files for %d backend commits: not rare (limit %d)", otherSyncs, applies, limit)
	}
	// Group commit: concurrent writers share the syncs.
	if logSyncs > writes/2 {
		t.Errorf("%d puts from %d concurrent writers took %d syncs of the commit log: hardly shared", writes, writers, logSyncs)
	}
}
