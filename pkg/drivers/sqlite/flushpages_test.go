package sqlite_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/kite-db/kite/pkg/drivers/sqlite"
)

// BenchmarkFlushPages is what one flush applied behind a log costs per
// row (raftsql's member database, sqlite mode's log commit): puts of 1 KiB
// to random keys of 10,000, committed unsynced in transactions of rows
// rows, as memtail flushes them. pages/row is the WAL frames a row costs
// (every page the transaction dirtied is written once at its COMMIT, and
// copied again by the next checkpoint): the kv row's share of its page
// and of the log's inner pages, which a flush of more rows shares. (Before
// schema version 3 a row also wrote a leaf of the table live, which random
// keys spread over the whole table.)
func BenchmarkFlushPages(b *testing.B) {
	for _, rows := range []int{100, 300, 1000, 3000} {
		b.Run(fmt.Sprintf("rows=%d", rows), func(b *testing.B) { benchmarkFlushPages(b, rows, false) })
	}
	b.Run("rows=300/key-order", func(b *testing.B) { benchmarkFlushPages(b, 300, true) })
}

func benchmarkFlushPages(b *testing.B, rows int, sorted bool) {
	const keys = 10_000
	path := filepath.Join(b.TempDir(), "kite.db")
	// No background checkpoint after the first: the WAL then grows by
	// exactly the frames each COMMIT writes.
	be, err := sqlite.Open(context.Background(), path, sqlite.Options{NoCommitSync: true, CheckpointInterval: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { be.Close() })
	w := newRevisionWriter(be, keys, make([]byte, 1024), "/registry/configmaps/bench/cm-%05d")
	commit := func(n int, pick func(sub int) int) { w.commit(b, n, pick) }
	// Load every key, then let the one checkpoint copy the load.
	for i := 0; i < keys; i += 1000 {
		commit(1000, func(sub int) int { return i + sub })
	}
	if err := be.Sync(); err != nil {
		b.Fatal(err)
	}
	walSize := func() int64 {
		st, err := os.Stat(path + "-wal")
		if err != nil {
			b.Fatal(err)
		}
		return st.Size()
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var frames, committed int64
	cpu0 := cpuTime(b)
	b.ResetTimer()
	for b.Loop() {
		before := walSize()
		picks := make([]int, rows)
		for i := range picks {
			picks[i] = rng.IntN(keys)
		}
		if sorted {
			slices.Sort(picks)
		}
		commit(rows, func(sub int) int { return picks[sub] })
		if after := walSize(); after > before {
			frames += (after - before) / (4096 + 24)
			committed += int64(rows)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*rows), "µs/row")
	// The process's CPU time is steadier than the wall clock on a shared
	// machine: time spent waiting for a core is not in it.
	b.ReportMetric(float64((cpuTime(b)-cpu0).Microseconds())/float64(b.N*rows), "cpu-µs/row")
	if committed > 0 {
		b.ReportMetric(float64(frames)/float64(committed), "pages/row")
	}
}

// cpuTime is the user and system time the process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
