package main

import (
	"strings"
	"testing"
)

func TestByteSizeFlag(t *testing.T) {
	for in, want := range map[string]int64{
		"536870912": 512 << 20, "512MiB": 512 << 20, "512Mi": 512 << 20, "512M": 512 << 20,
		"1GiB": 1 << 30, "2 GB": 2 << 30, "64KiB": 64 << 10, "0": 0,
	} {
		var b byteSize
		if err := b.Set(in); err != nil || int64(b) != want {
			t.Errorf("Set(%q) = %d, %v; want %d", in, b, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "-1", "1.5GiB", "12XB", "9999999999GiB"} {
		var b byteSize
		if err := b.Set(in); err == nil {
			t.Errorf("Set(%q) accepted: %d", in, b)
		}
	}
	for v, want := range map[int64]string{512 << 20: "512MiB", 1 << 30: "1GiB", 1536 << 20: "1536MiB", 1000: "1000"} {
		if got := (*byteSize)(&v).String(); got != want {
			t.Errorf("String(%d) = %q, want %q", v, got, want)
		}
	}
}

func TestMemoryBudgetFlag(t *testing.T) {
	f, err := parseServeFlags(nil, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if f.memoryBudget != defaultMemoryBudget {
		t.Fatalf("default budget %d, want %d", f.memoryBudget, defaultMemoryBudget)
	}
	if got := f.config(nil).ReadAheadBytes; got != 64<<20 {
		t.Fatalf("default read-ahead %d, want today's 64 MiB", got)
	}
	if got := f.config(nil).WatchRingBytes; got != 16<<20 {
		t.Fatalf("default watch ring %d, want today's 16 MiB", got)
	}
	if got := f.datastore(nil).RowCacheBytes; got != 16<<20 {
		t.Fatalf("default row cache %d, want memtail's 16 MiB", got)
	}
	f, err = parseServeFlags([]string{"--memory-budget", "256MiB"}, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := f.config(nil).WatchRingBytes; got != 4<<20 {
		t.Fatalf("256 MiB budget: watch ring %d, want 4 MiB", got)
	}
	if got := f.datastore(nil).RowCacheBytes; got != 4<<20 {
		t.Fatalf("256 MiB budget: row cache %d, want 4 MiB", got)
	}
	f, err = parseServeFlags(nil, env(map[string]string{"KITE_MEMORY_BUDGET": "1GiB"}))
	if err != nil || f.memoryBudget != 1<<30 {
		t.Fatalf("KITE_MEMORY_BUDGET=1GiB: %d, %v", f.memoryBudget, err)
	}
	if ds := f.datastore(nil); ds.SQLite.MmapBytes != 128<<20 || ds.SQLite.ReadConns != 4 {
		t.Fatalf("1 GiB budget: sqlite options %+v", ds.SQLite)
	}
	// Applied behind a log, SQLite commits once per flush: the readers map
	// a quarter as much and their pages stay in their own caches.
	f, err = parseServeFlags([]string{"--experimental-sqlite-log-commit"}, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if ds := f.datastore(nil); ds.SQLite.MmapBytes != 32<<20 || ds.SQLite.CacheSizeKiB != 4<<10 || ds.SQLite.WriterCacheSizeKiB != 4<<10 {
		t.Fatalf("1 GiB budget applied behind: sqlite options %+v, want 32 MiB mapped and 4 MiB cached per reader, 4 MiB for the writer", ds.SQLite)
	}
	// raftsql applies behind its WAL unless told not to.
	for _, c := range []struct {
		args   []string
		behind bool
	}{
		{[]string{"--datastore-endpoint", "raftsql"}, true},
		{[]string{"--datastore-endpoint", "raftsql", "--raft-apply-behind=false"}, false},
		{[]string{"--datastore-endpoint", "postgres://127.0.0.1/kite"}, false},
	} {
		f, err := parseServeFlags(c.args, env(nil))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := f.memoryShares(), splitMemory(defaultMemoryBudget, c.behind); got != want {
			t.Errorf("%v: shares %+v, want %+v", c.args, got, want)
		}
		if f.raft != nil && f.raft.ApplyBehind != c.behind {
			t.Errorf("%v: raftsql.Config.ApplyBehind %v, want %v", c.args, f.raft.ApplyBehind, c.behind)
		}
	}
	if _, err := parseServeFlags([]string{"--memory-budget", "16MiB"}, env(nil)); err == nil || !strings.Contains(err.Error(), "minimum") {
		t.Fatalf("16 MiB budget: %v, want refused as below the minimum", err)
	}
}

// The shares must add up to no more than the budget, whatever its size,
// or the budget would not bound anything.
func TestSplitMemoryStaysInBudget(t *testing.T) {
	for _, c := range []struct {
		budget int64
		behind bool
	}{{minMemoryBudget, false}, {100 << 20, false}, {defaultMemoryBudget, false}, {3<<30 + 7, false},
		{minMemoryBudget, true}, {defaultMemoryBudget, true}} {
		budget, m := c.budget, splitMemory(c.budget, c.behind)
		sqliteCaches := int64(sqliteReadConns*m.readerCacheKiB+m.writerCacheKiB) << 10
		total := sqliteReadConns*m.readerMmap + sqliteCaches + m.goHeap
		if total > budget || m.goHeap < budget/3 || m.readerMmap <= 0 || m.readerCacheKiB <= 0 || m.readAhead <= 0 {
			t.Errorf("budget %d: %+v adds up to %d", budget, m, total)
		}
		if m.readAhead+m.watchRing+m.rowCache > m.goHeap || m.watchRing <= 0 || m.rowCache <= 0 {
			t.Errorf("budget %d: read-ahead %d, watch ring %d and row cache %d do not fit the heap's share %d", budget, m.readAhead, m.watchRing, m.rowCache, m.goHeap)
		}
	}
}
