package test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// memoryCgroup is a memory cgroup made for one test: v1 (a directory of
// the memory hierarchy) or v2 (a directory of the unified hierarchy whose
// parent delegates the memory controller).
type memoryCgroup struct {
	dir string
	v2  bool
}

// newMemoryCgroup makes a cgroup limited to limit bytes, removed when the
// test ends. Without a writable memory hierarchy (not root, or a container
// that hides it) the test is skipped, except under CI=true, where CI runs
// as root on a machine that has one.
func newMemoryCgroup(t *testing.T, limit int64) *memoryCgroup {
	t.Helper()
	name := fmt.Sprintf("kite-test-%d", os.Getpid())
	var cg *memoryCgroup
	if ctrl, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil && strings.Contains(string(ctrl), "memory") {
		cg = &memoryCgroup{dir: filepath.Join("/sys/fs/cgroup", name), v2: true}
	} else if _, err := os.Stat("/sys/fs/cgroup/memory/memory.limit_in_bytes"); err == nil {
		cg = &memoryCgroup{dir: filepath.Join("/sys/fs/cgroup/memory", name)}
	}
	var err error
	if cg == nil {
		err = errors.New("no memory cgroup hierarchy under /sys/fs/cgroup")
	} else if err = os.Mkdir(cg.dir, 0o755); err == nil {
		t.Cleanup(func() { os.Remove(cg.dir) })
		err = cg.write(cg.limitFile(), strconv.FormatInt(limit, 10))
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true runs as root on a machine with a memory cgroup: %v", err)
		}
		t.Skipf("needs a writable memory cgroup (run as root): %v", err)
	}
	return cg
}

func (c *memoryCgroup) limitFile() string {
	if c.v2 {
		return "memory.max"
	}
	return "memory.limit_in_bytes"
}

func (c *memoryCgroup) write(file, value string) error {
	return os.WriteFile(filepath.Join(c.dir, file), []byte(value), 0o644)
}

func (c *memoryCgroup) add(pid int) error { return c.write("cgroup.procs", strconv.Itoa(pid)) }

// stat reads one counter: a file of its own (v1's memory.failcnt), or a
// "name value" line of a file (memory.events, memory.oom_control).
func (c *memoryCgroup) stat(file, name string) (int64, error) {
	b, err := os.ReadFile(filepath.Join(c.dir, file))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if name == "" && len(f) == 1 || len(f) == 2 && f[0] == name {
			return strconv.ParseInt(f[len(f)-1], 10, 64)
		}
	}
	return 0, fmt.Errorf("%s: no %q", file, name)
}

// pressure reports how often the cgroup hit its limit and how many of its
// processes the kernel killed for memory.
func (c *memoryCgroup) pressure() (hitLimit, oomKills int64, err error) {
	if c.v2 {
		if hitLimit, err = c.stat("memory.events", "max"); err != nil {
			return 0, 0, err
		}
		oomKills, err = c.stat("memory.events", "oom_kill")
		return hitLimit, oomKills, err
	}
	if hitLimit, err = c.stat("memory.failcnt", ""); err != nil {
		return 0, 0, err
	}
	oomKills, err = c.stat("memory.oom_control", "oom_kill")
	return hitLimit, oomKills, err
}

// TestMemoryBudgetUnderCgroupLimit runs kite in a memory cgroup smaller
// than its database plus what its clients ask for, as a pod with a memory
// limit is: writes, paginated and unpaginated lists together until the
// cgroup has hit its limit again and again. kite must slow down (the
// kernel reclaims file pages, the Go collector works harder), never be
// killed, and every answer must stay complete.
func TestMemoryBudgetUnderCgroupLimit(t *testing.T) {
	const (
		limit      = 256 << 20
		keys       = 60000
		valSize    = 2048
		unpaged    = 15000 // keys of one unpaginated list: ~30 MiB answer
		loadWrites = 4
	)
	cg := newMemoryCgroup(t, limit)
	k := startKiteIn(t, t.TempDir(), "--memory-budget", "96MiB")
	if err := cg.add(k.proc.Pid()); err != nil {
		t.Fatalf("move kite into the cgroup: %v", err)
	}
	ctx := testCtx(t, 4*time.Minute)
	val := string(bytes.Repeat([]byte("m"), valSize))

	// Load: 120 MiB of values, so the database file is about half the
	// cgroup's limit and its page cache alone fills the rest.
	var wg sync.WaitGroup
	errc := make(chan error, loadWrites)
	for w := range loadWrites {
		wg.Go(func() {
			for i := w * 100; i < keys; i += loadWrites * 100 {
				ops := make([]clientv3.Op, 0, 100)
				for j := i; j < i+100 && j < keys; j++ {
					ops = append(ops, clientv3.OpPut(fmt.Sprintf("/mem/%06d", j), val))
				}
				if _, err := k.Client.Txn(ctx).Then(ops...).Commit(); err != nil {
					errc <- fmt.Errorf("load: %w", err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}

	// Load under pressure: a writer, two clients paging through everything
	// (limit 500) and one unpaginated list of a quarter of the keys, again
	// and again, for 20 s: the cgroup is at its limit all along, and a full
	// paginated list may take longer than that, so progress is counted in
	// pages; every list that completes must hold every key.
	runCtx, stop := context.WithTimeout(ctx, 20*time.Second)
	defer stop()
	var pages, unpagedLists, writes atomic.Int64
	fail := make(chan error, 4)
	report := func(err error) {
		if runCtx.Err() == nil {
			select {
			case fail <- err:
			default:
			}
			stop()
		}
	}
	wg.Go(func() {
		for i := 0; runCtx.Err() == nil; i++ {
			if _, err := k.Client.Put(runCtx, fmt.Sprintf("/mem/%06d", i%keys), val); err != nil {
				report(fmt.Errorf("put: %w", err))
				return
			}
			writes.Add(1)
		}
	})
	for range 2 {
		wg.Go(func() {
			for runCtx.Err() == nil {
				n, err := pagedCount(runCtx, k.Client, "/mem/", 500, &pages)
				if runCtx.Err() != nil {
					return // cut by the end of the run
				}
				if err != nil {
					report(fmt.Errorf("paginated list: %w", err))
					return
				}
				if n != keys {
					report(fmt.Errorf("paginated list: %d keys, want %d", n, keys))
					return
				}
			}
		})
	}
	wg.Go(func() {
		for runCtx.Err() == nil {
			resp, err := k.Client.Get(runCtx, "/mem/", clientv3.WithRange(fmt.Sprintf("/mem/%06d", unpaged)))
			if err != nil {
				report(fmt.Errorf("unpaginated list: %w", err))
				return
			}
			if len(resp.Kvs) != unpaged {
				report(fmt.Errorf("unpaginated list: %d keys, want %d", len(resp.Kvs), unpaged))
				return
			}
			unpagedLists.Add(1)
		}
	})
	wg.Wait()
	select {
	case err := <-fail:
		t.Fatalf("under a %d MiB cgroup: %v\nkite exited: %v", limit>>20, err, exited(k))
	default:
	}
	hit, kills, err := cg.pressure()
	if err != nil {
		t.Fatalf("read the cgroup's counters: %v", err)
	}
	t.Logf("in 20 s under a %d MiB limit: %d writes, %d list pages of 500, %d unpaginated lists of %d keys; limit reached %d times, OOM kills %d",
		limit>>20, writes.Load(), pages.Load(), unpagedLists.Load(), unpaged, hit, kills)
	if exited(k) || kills != 0 {
		t.Fatalf("kite was killed under the memory limit (OOM kills %d)", kills)
	}
	if hit == 0 {
		t.Fatalf("the cgroup never reached its limit: the test put kite under no pressure")
	}
	if pages.Load() == 0 || unpagedLists.Load() == 0 || writes.Load() == 0 {
		t.Fatalf("kite made no progress under the limit")
	}
}

// pagedCount lists a prefix as kube-apiserver pages it and counts the keys
// and, in pages, the pages read.
func pagedCount(ctx context.Context, c *clientv3.Client, prefix string, limit int64, pages *atomic.Int64) (int, error) {
	end := clientv3.GetPrefixRangeEnd(prefix)
	key, rev, n := prefix, int64(0), 0
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(limit)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := c.Get(ctx, key, opts...)
		if err != nil {
			return n, err
		}
		rev = resp.Header.Revision
		n += len(resp.Kvs)
		pages.Add(1)
		if !resp.More || len(resp.Kvs) == 0 {
			return n, nil
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

func exited(k *kiteProcess) bool {
	select {
	case <-k.exited:
		return true
	default:
		return false
	}
}
