package sqlite_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/kite-db/kite/pkg/drivers/sqlite"
)

// BenchmarkFlushPages is what one flush applied behind a log costs per
// row (raftsql's member database, sqlite mode's log commit): puts of 1 KiB
// to random keys of 10,000, committed unsynced in transactions of rows
// rows, as memtail flushes them. pages/row is the WAL frames a row costs
// (every page the transaction dirtied is written once at its COMMIT, and
// copied again by the next checkpoint): the kv row's share of its page,
// plus the kv_key and live index pages it lands on, which random keys
// spread over the whole index. A flush of more rows shares those pages.
func BenchmarkFlushPages(b *testing.B) {
	for _, rows := range []int{100, 300, 1000, 3000} {
		b.Run(fmt.Sprintf("rows=%d", rows), func(b *testing.B) { benchmarkFlushPages(b, rows) })
	}
}

func benchmarkFlushPages(b *testing.B, rows int) {
	const keys = 10_000
	path := filepath.Join(b.TempDir(), "kite.db")
	// No background checkpoint after the first: the WAL then grows by
	// exactly the frames each COMMIT writes.
	be, err := sqlite.Open(context.Background(), path, sqlite.Options{NoCommitSync: true, CheckpointInterval: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { be.Close() })
	ctx := context.Background()
	value := make([]byte, 1024)
	version := make([]int64, keys)
	create := make([]int64, keys)
	rev := int64(0)
	commit := func(n int, pick func(i int) int) {
		rev++
		tx, err := be.BeginWrite(ctx)
		if err != nil {
			b.Fatal(err)
		}
		for sub := range n {
			k := pick(sub)
			if version[k] == 0 {
				create[k] = rev
			}
			version[k]++
			kv := &mvccpb.KeyValue{Key: fmt.Appendf(nil, "/registry/configmaps/bench/cm-%05d", k),
				CreateRevision: create[k], ModRevision: rev, Version: version[k], Value: value}
			if err := tx.Put(ctx, kv, int64(sub)); err != nil {
				b.Fatal(err)
			}
		}
		if err := tx.SetRevisions(ctx, rev, 0); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
	}
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
	b.ResetTimer()
	for b.Loop() {
		before := walSize()
		commit(rows, func(int) int { return rng.IntN(keys) })
		if after := walSize(); after > before {
			frames += (after - before) / (4096 + 24)
			committed += int64(rows)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*rows), "µs/row")
	if committed > 0 {
		b.ReportMetric(float64(frames)/float64(committed), "pages/row")
	}
}
