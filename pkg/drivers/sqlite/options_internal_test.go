package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
)

// The memory options must reach every connection: they are what
// --memory-budget bounds.
func TestMemoryOptionsReachConnections(t *testing.T) {
	ctx := context.Background()
	b, err := Open(ctx, filepath.Join(t.TempDir(), "kite.db"), Options{
		ReadConns: 2, CacheSizeKiB: 3072, WriterCacheSizeKiB: 5120, MmapBytes: 32 << 20,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	pragma := func(conn *sql.Conn, name string) int64 {
		t.Helper()
		var v int64
		if err := conn.QueryRowContext(ctx, "PRAGMA "+name).Scan(&v); err != nil {
			t.Fatalf("PRAGMA %s: %v", name, err)
		}
		return v
	}
	for i, rc := range b.rconns {
		if got := pragma(rc.conn, "mmap_size"); got != 32<<20 {
			t.Errorf("reader %d: mmap_size %d, want %d", i, got, 32<<20)
		}
		if got := pragma(rc.conn, "cache_size"); got != -3072 {
			t.Errorf("reader %d: cache_size %d, want -3072 (KiB)", i, got)
		}
	}
	// The writer is the only connection that commits, so its own page
	// cache stays valid between its transactions; it needs no mapping.
	if got := pragma(b.wconn, "mmap_size"); got != 0 {
		t.Errorf("writer: mmap_size %d, want 0", got)
	}
	if got := pragma(b.wconn, "cache_size"); got != -5120 {
		t.Errorf("writer: cache_size %d, want -5120 (KiB)", got)
	}

	// Negative: no mapping at all; zero: the defaults.
	for _, c := range []struct {
		mmap, want int64
	}{{-1, 0}, {0, defaultMmapBytes}} {
		b2, err := Open(ctx, filepath.Join(t.TempDir(), "kite.db"), Options{ReadConns: 1, MmapBytes: c.mmap})
		if err != nil {
			t.Fatal(err)
		}
		if got := pragma(b2.rconns[0].conn, "mmap_size"); got != c.want {
			t.Errorf("MmapBytes %d: reader mmap_size %d, want %d", c.mmap, got, c.want)
		}
		if got := pragma(b2.wconn, "cache_size"); got != -defaultWriterCacheKiB {
			t.Errorf("writer cache_size %d, want the default -%d", got, defaultWriterCacheKiB)
		}
		b2.Close()
	}
}
