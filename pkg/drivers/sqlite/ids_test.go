package sqlite

import (
	"context"
	"database/sql"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

func TestRowIDBounds(t *testing.T) {
	id, err := rowID(7, 3)
	if err != nil || revOf(id) != 7 || subOf(id) != 3 {
		t.Fatalf("rowID(7, 3) = %d, %v", id, err)
	}
	if id, err := rowID(maxRev, maxSub); err != nil || id != math.MaxInt64 {
		t.Fatalf("rowID(maxRev, maxSub) = %d, %v", id, err)
	}
	if _, err := rowID(1, maxSub+1); err == nil || !strings.Contains(err.Error(), "1048576 changes") {
		t.Fatalf("rowID beyond maxSub: %v", err)
	}
	if _, err := rowID(maxRev+1, 0); err == nil {
		t.Fatal("rowID beyond maxRev: no error")
	}
	if firstID(0) != 0 || firstID(math.MaxInt64) != math.MaxInt64 || lastID(math.MaxInt64) != math.MaxInt64 ||
		lastID(-1) != -1 || lastID(2) != 3<<subBits-1 || firstID(3) != 3<<subBits {
		t.Fatal("firstID/lastID clamp wrongly")
	}
}

// A put beyond the bounds fails and poisons the transaction, so nothing of
// it can commit.
func TestPutBeyondSubBound(t *testing.T) {
	ctx := context.Background()
	b, err := Open(ctx, filepath.Join(t.TempDir(), "kite.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	tx, err := b.BeginWrite(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = tx.Put(ctx, &mvccpb.KeyValue{Key: []byte("k"), ModRevision: 1, CreateRevision: 1, Version: 1}, maxSub+1)
	if err == nil {
		t.Fatal("put beyond maxSub: no error")
	}
	if err := tx.Commit(); err == nil {
		t.Fatal("commit after a failed put: no error")
	}
}

// A file of another schema version is refused with both versions named.
func TestOldSchemaRefused(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "kite.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{metaTable, `INSERT INTO meta VALUES ('schema_version', 1)`} {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	b, err := Open(ctx, path, Options{})
	if err == nil {
		b.Close()
		t.Fatal("Open of a version 1 file: no error")
	}
	if !strings.Contains(err.Error(), "schema version 1, this kite reads version 2") {
		t.Fatalf("Open of a version 1 file: %v", err)
	}
}
