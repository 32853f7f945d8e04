package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/kite-db/kite/pkg/mvcc"
)

func TestRowIDBounds(t *testing.T) {
	id, err := rowID(7, 3)
	if err != nil || revOf(id) != 7 || subOf(id) != 3 {
		t.Fatalf("rowID(7, 3) = %d, %v", id, err)
	}
	if id, err := rowID(maxRev, maxSub); err != nil || id != math.MaxInt64 {
		t.Fatalf("rowID(maxRev, maxSub) = %d, %v", id, err)
	}
	// The change-count bound is the one every replica hits alike; the
	// revision bound is not an answer to a request but a full schema.
	if _, err := rowID(1, maxSub+1); !errors.Is(err, mvcc.ErrTooManyChanges) {
		t.Fatalf("rowID beyond maxSub: %v, want mvcc.ErrTooManyChanges", err)
	}
	if _, err := rowID(maxRev+1, 0); err == nil || errors.Is(err, mvcc.ErrTooManyChanges) {
		t.Fatalf("rowID beyond maxRev: %v, want an error other than mvcc.ErrTooManyChanges", err)
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
	if !errors.Is(err, mvcc.ErrTooManyChanges) {
		t.Fatalf("put beyond maxSub: %v, want mvcc.ErrTooManyChanges", err)
	}
	if err := tx.Commit(); err == nil {
		t.Fatal("commit after a failed put: no error")
	}
}

// Options.MaxChangesPerRevision lowers the change-count bound: the change
// at the limit fails as one beyond the schema's bound does, the one before
// it does not.
func TestMaxChangesPerRevision(t *testing.T) {
	ctx := context.Background()
	b, err := Open(ctx, filepath.Join(t.TempDir(), "kite.db"), Options{MaxChangesPerRevision: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	tx, err := b.BeginWrite(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := tx.Put(ctx, &mvccpb.KeyValue{Key: []byte("k"), ModRevision: 1, CreateRevision: 1, Version: 1}, 3); err != nil {
		t.Fatalf("put of change 3 of 4: %v", err)
	}
	if err := tx.Delete(ctx, []byte("k"), 1, 4); !errors.Is(err, mvcc.ErrTooManyChanges) {
		t.Fatalf("delete of change 4 of 4: %v, want mvcc.ErrTooManyChanges", err)
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
	if want := fmt.Sprintf("schema version 1, this kite reads version %d", schemaVersion); !strings.Contains(err.Error(), want) {
		t.Fatalf("Open of a version 1 file: %v", err)
	}
}
