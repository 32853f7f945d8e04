package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/kite-db/kite/pkg/mvcc"
)

// SQLite's own "database or disk is full" (a database held to a few pages
// by max_page_count fills as a full disk would) and ENOSPC are
// mvcc.ErrDiskFull; other errors are not.
func TestClassifyDiskFull(t *testing.T) {
	ctx := context.Background()
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "full.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	for _, q := range []string{"CREATE TABLE t (v BLOB)", "PRAGMA max_page_count = 8"} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var full error
	for i := 0; i < 100 && full == nil; i++ {
		_, full = db.ExecContext(ctx, "INSERT INTO t VALUES (zeroblob(4096))")
	}
	if full == nil {
		t.Fatal("a database of 8 pages never filled")
	}
	if err := classify(fmt.Errorf("insert: %w", full)); !errors.Is(err, mvcc.ErrDiskFull) {
		t.Errorf("classify(%v) is not mvcc.ErrDiskFull", full)
	}
	if err := classify(fmt.Errorf("write: %w", syscall.ENOSPC)); !errors.Is(err, mvcc.ErrDiskFull) {
		t.Errorf("classify(ENOSPC) = %v, not mvcc.ErrDiskFull", err)
	}
	_, other := db.ExecContext(ctx, "INSERT INTO missing VALUES (1)")
	if other == nil || errors.Is(classify(other), mvcc.ErrDiskFull) {
		t.Errorf("classify(%v) is mvcc.ErrDiskFull", other)
	}
}
