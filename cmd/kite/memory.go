package main

import (
	"fmt"
	"log/slog"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/kite-db/kite/pkg/drivers/sqlite"
)

// defaultMemoryBudget is --memory-budget's default: each read connection
// maps 128 MiB of the file, which covers the hot pages of the databases in
// docs/benchmarks.md's 10,000-key runs, and the resident set stays within a
// reference etcd's at 200,000 keys.
const defaultMemoryBudget = 1 << 30

// minMemoryBudget keeps every share large enough to work with.
const minMemoryBudget = 32 << 20

// memoryShares is how --memory-budget is divided between what kite keeps in
// memory. The budget bounds what kite holds on to between requests; a
// request's own answer (an unpaginated list of a large range) is in memory
// while it is sent, as in etcd, and the Go runtime's soft limit makes the
// collector work harder, not the process fail, when that pushes the heap
// past its share.
type memoryShares struct {
	// readerMmap is the part of the database file each SQLite read
	// connection maps. Every connection maps the file on its own, and a
	// page touched through several mappings counts that many times in
	// the process's resident set (though it is one page of the kernel's
	// page cache), so this share is divided by the read connections.
	// Pages beyond the mapping are read with pread from the page cache.
	readerMmap int64
	// readerCacheKiB and writerCacheKiB are SQLite's page caches (its own
	// heap, outside Go's): readers lose theirs at every commit by another
	// connection, the writer keeps its own for the index pages it updates.
	readerCacheKiB int
	writerCacheKiB int
	// readAhead bounds the list pages read before they are asked for.
	readAhead int64
	// watchRing bounds the events of recent revisions the watch hub keeps
	// for watchers a little behind; it lives in the Go heap's share.
	watchRing int64
	// rowCache bounds the writer's cache of the newest rows applied
	// behind a log (memtail.Options.RowCacheBytes); it lives in the Go
	// heap's share too.
	rowCache int64
	// goHeap is the Go runtime's soft memory limit: the rest of the
	// budget after the mappings and SQLite's caches.
	goHeap int64
}

// Shares of the budget, as fractions 1/n.
const (
	mmapShareDiv = 2 // all read connections' mappings together
	// behindMmapShareDiv replaces mmapShareDiv when a memtail applies
	// behind a log (raftsql's default; sqlite mode with
	// --experimental-sqlite-log-commit): SQLite then commits
	// once per flush, every 100 ms, instead of once per write, so a read
	// connection's own page cache survives between commits and the
	// mapping saves few reads, while every mapping counts the pages it
	// touched in the resident set again (docs/benchmarks.md, "a member's
	// memory is the readers' mappings").
	behindMmapShareDiv = 8
	readAheadShareDiv  = 16 //
	writerCacheDiv     = 64 //
	// behindWriterCacheDiv replaces writerCacheDiv applied behind a log:
	// the writer is then the flush, whose cache holds the index pages it
	// updates every flush and, for the rest, the pages of rows it has just
	// written and will not read again, so a cache of 1/64 fills with
	// those and stays resident (docs/benchmarks.md, "The writer's page
	// cache applied behind").
	behindWriterCacheDiv = 256
	readerCacheDiv       = 256 // each read connection
	watchRingDiv         = 64  // part of the Go heap's share
	rowCacheDiv          = 64  // part of the Go heap's share
	sqliteReadConns      = 4   // the SQLite driver's default read pool
)

// splitMemory divides budget; behind says a memtail applies behind a log.
func splitMemory(budget int64, behind bool) memoryShares {
	mmapDiv, writerDiv := int64(mmapShareDiv), int64(writerCacheDiv)
	if behind {
		mmapDiv, writerDiv = behindMmapShareDiv, behindWriterCacheDiv
	}
	m := memoryShares{
		readerMmap:     budget / mmapDiv / sqliteReadConns,
		readerCacheKiB: int(budget / readerCacheDiv >> 10),
		writerCacheKiB: int(budget / writerDiv >> 10),
		readAhead:      budget / readAheadShareDiv,
		watchRing:      budget / watchRingDiv,
		rowCache:       budget / rowCacheDiv,
	}
	m.goHeap = budget - budget/mmapDiv - sqliteReadConns*budget/readerCacheDiv - budget/writerDiv
	return m
}

// sqlite returns the SQLite driver's options for these shares.
func (m memoryShares) sqlite() sqlite.Options {
	return sqlite.Options{
		ReadConns:          sqliteReadConns,
		CacheSizeKiB:       m.readerCacheKiB,
		WriterCacheSizeKiB: m.writerCacheKiB,
		MmapBytes:          m.readerMmap,
	}
}

// applyGoLimit sets the Go runtime's soft memory limit to the heap's share,
// unless the operator set GOMEMLIMIT, which the runtime has applied already.
func (m memoryShares) applyGoLimit(log *slog.Logger, getenv func(string) string) {
	if getenv("GOMEMLIMIT") != "" {
		log.Info("GOMEMLIMIT is set; the Go heap's share of --memory-budget is not applied", "GOMEMLIMIT", getenv("GOMEMLIMIT"))
		return
	}
	debug.SetMemoryLimit(m.goHeap)
}

// byteSize is a flag value in bytes that also takes binary suffixes:
// 536870912, 512MiB, 1GiB (KiB, MiB, GiB; KB, MB, GB and K, M, G mean the
// same binary units, as Kubernetes' Mi and Gi do).
type byteSize int64

func (b *byteSize) String() string {
	v := int64(*b)
	for _, u := range []struct {
		suffix string
		shift  uint
	}{{"GiB", 30}, {"MiB", 20}, {"KiB", 10}} {
		if v != 0 && v%(1<<u.shift) == 0 {
			return strconv.FormatInt(v>>u.shift, 10) + u.suffix
		}
	}
	return strconv.FormatInt(v, 10)
}

func (b *byteSize) Set(s string) error {
	num := strings.TrimSpace(s)
	shift := uint(0)
	for _, u := range []struct {
		suffixes []string
		shift    uint
	}{{[]string{"GiB", "GB", "Gi", "G"}, 30}, {[]string{"MiB", "MB", "Mi", "M"}, 20}, {[]string{"KiB", "KB", "Ki", "K"}, 10}} {
		for _, suf := range u.suffixes {
			if n, ok := strings.CutSuffix(num, suf); ok {
				num, shift = strings.TrimSpace(n), u.shift
				break
			}
		}
		if shift != 0 {
			break
		}
	}
	v, err := strconv.ParseInt(num, 10, 64)
	if err != nil || v < 0 || v > (1<<62)>>shift {
		return fmt.Errorf("%q is not a size in bytes (like 536870912, 512MiB or 1GiB)", s)
	}
	*b = byteSize(v << shift)
	return nil
}

// checkMemoryBudget refuses a budget too small to split.
func checkMemoryBudget(b byteSize) error {
	if minimum := byteSize(minMemoryBudget); b < minimum {
		return fmt.Errorf("--memory-budget %s is below the minimum of %s", &b, &minimum)
	}
	return nil
}
