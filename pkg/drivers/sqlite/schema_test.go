package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"slices"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// version2Schema is the schema kite wrote as version 2, before the key
// index answered latest reads: the table live of each key's newest row and
// its partial lease index, and the log's index on key.
var version2Schema = []string{
	metaTable,
	`CREATE TABLE kv (id INTEGER NOT NULL PRIMARY KEY, key BLOB NOT NULL,
		create_rev INTEGER NOT NULL, version INTEGER NOT NULL, lease INTEGER NOT NULL,
		deleted INTEGER NOT NULL, value BLOB NOT NULL)`,
	`CREATE INDEX kv_key ON kv (key, id)`,
	`CREATE TABLE live (key BLOB NOT NULL PRIMARY KEY, id INTEGER NOT NULL,
		create_rev INTEGER NOT NULL, version INTEGER NOT NULL, lease INTEGER NOT NULL) WITHOUT ROWID`,
	`CREATE INDEX live_leased ON live (lease) WHERE lease != 0`,
	`CREATE TABLE lease (id INTEGER NOT NULL PRIMARY KEY, ttl INTEGER NOT NULL)`,
	`CREATE TABLE alarm (member INTEGER NOT NULL, type INTEGER NOT NULL,
		PRIMARY KEY (member, type)) WITHOUT ROWID`,
	`INSERT INTO meta VALUES ('current', 4), ('compacted', 0), ('schema_version', 2)`,
}

// A version 2 file opens as version 3 with every key as it was: its
// leased keys move from live to leased, live goes, and the leases keep
// their keys for LeaseKeys and for the writer (a put without the lease
// takes the key out).
func TestMigrateFromVersion2(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "kite.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	// rev 1: a (lease 7); rev 2: b; rev 3: c (lease 7); rev 4: b deleted.
	rows := []struct {
		rev            int64
		key            string
		create, ver, l int64
		deleted        bool
	}{{1, "a", 1, 1, 7, false}, {2, "b", 2, 1, 0, false}, {3, "c", 3, 1, 7, false}, {4, "b", 0, 0, 0, true}}
	stmts := slices.Clone(version2Schema)
	stmts = append(stmts, `INSERT INTO lease VALUES (7, 60)`)
	for _, stmt := range stmts {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range rows {
		id := firstID(r.rev)
		if _, err := db.ExecContext(ctx, `INSERT INTO kv VALUES (?, ?, ?, ?, ?, ?, ?)`,
			id, []byte(r.key), r.create, r.ver, r.l, r.deleted, []byte("v"+r.key)); err != nil {
			t.Fatal(err)
		}
		if !r.deleted {
			if _, err := db.ExecContext(ctx, `INSERT INTO live VALUES (?, ?, ?, ?, ?)
				ON CONFLICT (key) DO UPDATE SET id = excluded.id`, []byte(r.key), id, r.create, r.ver, r.l); err != nil {
				t.Fatal(err)
			}
		} else if _, err := db.ExecContext(ctx, `DELETE FROM live WHERE key = ?`, []byte(r.key)); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()

	b, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatalf("Open of a version 2 file: %v", err)
	}
	defer b.Close()
	var version, lives int64
	if err := b.wconn.QueryRowContext(ctx, `SELECT value FROM meta WHERE name = 'schema_version'`).Scan(&version); err != nil || version != schemaVersion {
		t.Fatalf("schema version after Open: %d, %v; want %d", version, err, schemaVersion)
	}
	if err := b.wconn.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema WHERE name IN ('live', 'live_leased', 'kv_key')`).Scan(&lives); err != nil || lives != 0 {
		t.Fatalf("live, live_leased and kv_key after Open: %d of them (%v), want none", lives, err)
	}
	tx, err := b.BeginRead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	kvs, err := tx.Range(ctx, []byte("a"), []byte{0}, 4, 0, false)
	if err != nil || len(kvs) != 2 || string(kvs[0].Key) != "a" || string(kvs[1].Value) != "vc" || kvs[1].Lease != 7 {
		t.Fatalf("Range after migration: %v, %v; want a and c", kvs, err)
	}
	leased, err := tx.LeaseKeys(ctx, 7)
	if err != nil || len(leased) != 2 || string(leased[0]) != "a" || string(leased[1]) != "c" {
		t.Fatalf("LeaseKeys(7) after migration: %q, %v; want a, c", leased, err)
	}
	tx.Rollback()

	// A put of a without its lease must take a out of leased: the writer
	// learned at Open that a has one.
	w, err := b.BeginWrite(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Put(ctx, &mvccpb.KeyValue{Key: []byte("a"), Value: []byte("va2"), CreateRevision: 1, ModRevision: 5, Version: 2}, 0); err != nil {
		t.Fatal(err)
	}
	if err := w.SetRevisions(ctx, 5, 0); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := leaseKeys(t, b, 7); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("LeaseKeys(7) after a put of a without a lease: %q, want c", got)
	}
}

// A file of a newer schema version than this kite's is refused, as an
// older kite refuses a version 3 file.
func TestNewerSchemaRefused(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "kite.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{metaTable, `INSERT INTO meta VALUES ('schema_version', 4)`} {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	if b, err := Open(ctx, path, Options{}); err == nil {
		b.Close()
		t.Fatal("Open of a version 4 file: no error")
	}
}

func leaseKeys(t *testing.T, b *Backend, lease int64) []string {
	t.Helper()
	tx, err := b.BeginRead(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	keys, err := tx.LeaseKeys(context.Background(), lease)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, k := range keys {
		out = append(out, string(k))
	}
	return out
}
