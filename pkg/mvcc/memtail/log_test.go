package memtail_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/kite-db/kite/pkg/drivers/sqlite"
	"github.com/kite-db/kite/pkg/mvcc"
	"github.com/kite-db/kite/pkg/mvcc/memtail"
)

// openLogged opens a memtail Backend with a log over the SQLite file in
// dir; flushed says whether the tail is flushed at all while it runs.
func openLogged(t *testing.T, dir string, flushed bool) *memtail.Backend {
	t.Helper()
	ctx := context.Background()
	base, err := sqlite.Open(ctx, filepath.Join(dir, "kite.db"), sqlite.Options{NoCommitSync: true})
	if err != nil {
		t.Fatal(err)
	}
	opts := memtail.Options{LogDir: filepath.Join(dir, "kite.db.log"), FlushInterval: time.Hour, FlushOps: 1 << 30}
	if flushed {
		opts.FlushOps = 1
	}
	b, err := memtail.Open(ctx, base, opts)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// commitPuts commits n batches, batch i putting key k<i> at revision
// first+i.
func commitPuts(t *testing.T, b mvcc.Backend, first int64, n int) {
	t.Helper()
	ctx := context.Background()
	for i := range int64(n) {
		tx, err := b.BeginWrite(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rev := first + i
		kv := &mvccpb.KeyValue{Key: fmt.Appendf(nil, "k%03d", rev), Value: []byte("v"), CreateRevision: rev, ModRevision: rev, Version: 1}
		if err := tx.Put(ctx, kv, 0); err != nil {
			t.Fatal(err)
		}
		if err := tx.SetRevisions(ctx, rev, 0); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
}

// crashCopy copies dir as a kill -9 would leave it: the files as they are
// while the Backend runs, nothing flushed or closed.
func crashCopy(t *testing.T, dir string) string {
	t.Helper()
	out := t.TempDir()
	err := filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if info.IsDir() {
			return os.MkdirAll(filepath.Join(out, rel), 0o700)
		}
		src, err := os.Open(path)
		if err != nil {
			return err
		}
		defer src.Close()
		dst, err := os.Create(filepath.Join(out, rel))
		if err != nil {
			return err
		}
		defer dst.Close()
		_, err = io.Copy(dst, src)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// keys returns every live key.
func keys(t *testing.T, b mvcc.Backend) []string {
	t.Helper()
	ctx := context.Background()
	tx, err := b.BeginRead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	cur, _, err := tx.Revisions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cur == 0 {
		return nil
	}
	kvs, err := tx.Range(ctx, []byte{0}, []byte{0}, cur, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, kv := range kvs {
		out = append(out, string(kv.Key))
	}
	return out
}

func wantKeys(t *testing.T, b mvcc.Backend, from, to int64) {
	t.Helper()
	var want []string
	for rev := from; rev <= to; rev++ {
		want = append(want, fmt.Sprintf("k%03d", rev))
	}
	if got := keys(t, b); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("keys after restart:\n got  %v\n want %v", got, want)
	}
}

// TestLogReplaysWhatTheBaseMissed: after a crash the database holds only
// the batches flushed before it; the log gives back the rest, and the
// batches after the restart follow on.
func TestLogReplaysWhatTheBaseMissed(t *testing.T) {
	for _, flushed := range []bool{false, true} {
		t.Run(fmt.Sprintf("flushed=%v", flushed), func(t *testing.T) {
			dir := t.TempDir()
			b := openLogged(t, dir, flushed)
			defer b.Close()
			commitPuts(t, b, 1, 20)
			copied := crashCopy(t, dir)

			r := openLogged(t, copied, false)
			wantKeys(t, r, 1, 20)
			commitPuts(t, r, 21, 5)
			if err := r.Close(); err != nil {
				t.Fatal(err)
			}
			// Closed cleanly: everything is in the database and the log
			// replays nothing twice.
			r = openLogged(t, copied, false)
			defer r.Close()
			wantKeys(t, r, 1, 25)
		})
	}
}

// TestLogTornTailIsCut: a crash in the middle of writing a batch to the
// log leaves a partial last record. It was never synced, so never
// acknowledged: the restart cuts it off and keeps every batch before it,
// instead of replaying garbage or refusing to start.
func TestLogTornTailIsCut(t *testing.T) {
	dir := t.TempDir()
	b := openLogged(t, dir, false)
	defer b.Close()
	commitPuts(t, b, 1, 10)
	copied := crashCopy(t, dir)

	segs, err := filepath.Glob(filepath.Join(copied, "kite.db.log", "*.log"))
	if err != nil || len(segs) == 0 {
		t.Fatalf("no log segment in the copy: %v", err)
	}
	last := segs[len(segs)-1]
	data, err := os.ReadFile(last)
	if err != nil {
		t.Fatal(err)
	}
	// The segment is preallocated with zeros after its last record.
	end := len(bytes.TrimRight(data, "\x00"))
	if err := os.WriteFile(last, data[:end-3], 0o600); err != nil {
		t.Fatal(err)
	}

	r := openLogged(t, copied, false)
	defer r.Close()
	wantKeys(t, r, 1, 9)
	commitPuts(t, r, 10, 2)
	wantKeys(t, r, 1, 11)
}

// TestLogCorruptRecordStopsTheStart: damage inside a complete record is
// not a torn write; replaying around it would lose or invent writes, so
// the Backend does not open.
func TestLogCorruptRecordStopsTheStart(t *testing.T) {
	dir := t.TempDir()
	b := openLogged(t, dir, false)
	defer b.Close()
	commitPuts(t, b, 1, 10)
	copied := crashCopy(t, dir)

	segs, _ := filepath.Glob(filepath.Join(copied, "kite.db.log", "*.log"))
	if len(segs) == 0 {
		t.Fatal("no log segment in the copy")
	}
	data, err := os.ReadFile(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(data, []byte("k005"))
	if i < 0 {
		t.Fatal("batch 5 not found in the log segment")
	}
	data[i+1] ^= 0xff
	if err := os.WriteFile(segs[0], data, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	base, err := sqlite.Open(ctx, filepath.Join(copied, "kite.db"), sqlite.Options{NoCommitSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer base.Close()
	r, err := memtail.Open(ctx, base, memtail.Options{LogDir: filepath.Join(copied, "kite.db.log")})
	if err == nil {
		r.Close()
		t.Fatal("opened over a log with a corrupt record")
	}
	if !strings.Contains(err.Error(), "damaged") {
		t.Fatalf("Open refused the log for another reason than its damage: %v", err)
	}
}
