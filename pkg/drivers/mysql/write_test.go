package mysql_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/kite-db/kite/pkg/drivers/mysql"
	"github.com/kite-db/kite/pkg/drivers/mysql/mysqltest"
	"github.com/kite-db/kite/pkg/mvcc"
)

// commitPuts writes kvs as revision rev in one transaction.
func commitPuts(t *testing.T, b mvcc.Backend, rev int64, kvs ...*mvccpb.KeyValue) error {
	return commitKV(t, b, rev, kvs...)
}

// commitKV is commitPuts for tests and benchmarks.
func commitKV(t testing.TB, b mvcc.Backend, rev int64, kvs ...*mvccpb.KeyValue) error {
	t.Helper()
	ctx := context.Background()
	w, err := b.BeginWrite(ctx)
	if err != nil {
		t.Fatalf("BeginWrite: %v", err)
	}
	for i, kv := range kvs {
		kv.ModRevision, kv.CreateRevision, kv.Version = rev, rev, 1
		if err := w.Put(ctx, kv, int64(i)); err != nil {
			return errors.Join(err, w.Rollback())
		}
	}
	if err := w.SetRevisions(ctx, rev, 0); err != nil {
		return errors.Join(err, w.Rollback())
	}
	return w.Commit()
}

// TestKeyLength: a key of the longest length the schema holds, bytes
// 0xff included, is stored and read back whole and in order; a longer one
// is refused with mvcc.ErrRequestTooLarge and fails only its transaction.
func TestKeyLength(t *testing.T) {
	ctx := context.Background()
	b := mustOpen(t, mysqltest.NewDatabase(t))
	longest := bytes.Repeat([]byte{0xff}, 3000)
	shorter := append(bytes.Repeat([]byte{0xff}, 2999), 0xfe)
	if err := commitPuts(t, b, 1, &mvccpb.KeyValue{Key: longest, Value: []byte("a")},
		&mvccpb.KeyValue{Key: shorter, Value: []byte("b")}); err != nil {
		t.Fatalf("put keys of 3000 bytes: %v", err)
	}
	err := commitPuts(t, b, 2, &mvccpb.KeyValue{Key: append(longest, 0), Value: []byte("c")})
	if !errors.Is(err, mvcc.ErrRequestTooLarge) {
		t.Fatalf("put a key of 3001 bytes: %v, want ErrRequestTooLarge", err)
	}
	if err := commitPuts(t, b, 2, &mvccpb.KeyValue{Key: []byte("after"), Value: []byte("d")}); err != nil {
		t.Fatalf("put after the refused key: %v", err)
	}
	r, err := b.BeginRead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Rollback()
	for _, rev := range []int64{1, 2} { // historical, then latest
		kvs, err := r.Range(ctx, shorter, []byte{0}, rev, 0, false)
		if err != nil || len(kvs) != 2 || !bytes.Equal(kvs[0].Key, shorter) || !bytes.Equal(kvs[1].Key, longest) {
			t.Errorf("Range from the 3000-byte keys at %d = %d keys, %v; want both, in order", rev, len(kvs), err)
		}
	}
	if kv, err := r.Get(ctx, append(longest, 0)); err != nil || kv != nil {
		t.Errorf("Get of a key longer than any stored = %v, %v; want none", kv, err)
	}
}

// TestLargeWrites: a transaction larger than the server's
// max_allowed_packet (values of 1.5 MiB, many thousand keys) is split
// into statements that fit, and every byte value survives the driver's
// escaping.
func TestLargeWrites(t *testing.T) {
	ctx := context.Background()
	b := mustOpen(t, mysqltest.NewDatabase(t))
	every := make([]byte, 0, 512)
	for i := range 256 {
		every = append(every, byte(i), byte(255-i))
	}
	every = append(every, []byte(`'"\%_?;`)...)
	big := bytes.Repeat(every, (3<<19)/len(every)) // about 1.5 MiB
	var kvs []*mvccpb.KeyValue
	for i := range 12 {
		kvs = append(kvs, &mvccpb.KeyValue{Key: fmt.Appendf(nil, "big/%02d", i), Value: big})
	}
	for i := range 10000 {
		kvs = append(kvs, &mvccpb.KeyValue{Key: fmt.Appendf(nil, "small/%05d", i), Value: every})
	}
	kvs = append(kvs, &mvccpb.KeyValue{Key: every, Value: every})
	if err := commitPuts(t, b, 1, kvs...); err != nil {
		t.Fatalf("commit %d puts: %v", len(kvs), err)
	}
	r, err := b.BeginRead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Rollback()
	if n, err := r.Count(ctx, nil, []byte{0}, 1); err != nil || n != int64(len(kvs)) {
		t.Errorf("Count = %d, %v; want %d", n, err, len(kvs))
	}
	got, err := r.Range(ctx, []byte("big/"), []byte("big0"), 1, 0, false)
	if err != nil || len(got) != 12 {
		t.Fatalf("Range of the large values = %d, %v; want 12", len(got), err)
	}
	for _, kv := range got {
		if !bytes.Equal(kv.Value, big) {
			t.Errorf("%s: value of %d bytes differs from the %d written", kv.Key, len(kv.Value), len(big))
		}
	}
	if kv, err := r.Get(ctx, every); err != nil || kv == nil || !bytes.Equal(kv.Value, every) {
		t.Errorf("Get of the key holding every byte value = %v, %v", kv, err)
	}
	cs, err := r.Changes(ctx, 1, 1, 0, true)
	if err != nil || len(cs) != len(kvs) {
		t.Errorf("Changes = %d, %v; want %d", len(cs), err, len(kvs))
	}
}

// TestNewerSchemaRefused: a database written by a newer kite is not
// opened.
func TestNewerSchemaRefused(t *testing.T) {
	dsn := mysqltest.NewDatabase(t)
	b, err := mysql.Open(context.Background(), dsn, mysql.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	mysqltest.Exec(t, dsn, "UPDATE kite_schema SET version = 99")
	_, err = mysql.Open(context.Background(), dsn, mysql.Options{})
	if err == nil || !strings.Contains(err.Error(), "newer") {
		t.Fatalf("Open of a schema of version 99: %v, want a refusal", err)
	}
}

// TestConcurrentOpen: servers starting together on an empty database
// wait for one migration instead of racing to create the tables, and every
// one of them opens it.
func TestConcurrentOpen(t *testing.T) {
	dsn := mysqltest.NewDatabase(t)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() {
			b, err := mysql.Open(context.Background(), dsn, mysql.Options{})
			if err == nil {
				err = b.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent Open: %v", err)
	}
}

// TestHotKeyHistory: reads of the past cost what they return, not the
// square of a key's history. One key written 5,000 times (as a lease
// renewed every few seconds is, between compactions) is read at an old
// revision and its changes with their previous rows; a read that walked
// the key's history once per row would take seconds.
func TestHotKeyHistory(t *testing.T) {
	const versions = 5000
	ctx := context.Background()
	b := mustOpen(t, mysqltest.NewDatabase(t))
	w, err := b.BeginWrite(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for rev := int64(1); rev <= versions; rev++ {
		kv := &mvccpb.KeyValue{Key: []byte("hot"), Value: fmt.Appendf(nil, "v%d", rev),
			CreateRevision: 1, ModRevision: rev, Version: rev}
		if err := w.Put(ctx, kv, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.SetRevisions(ctx, versions, 0); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	r, err := b.BeginRead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Rollback()
	start := time.Now()
	for _, rev := range []int64{10, 2500, 4999} {
		kvs, err := r.Range(ctx, []byte("hot"), nil, rev, 0, false)
		if err != nil || len(kvs) != 1 || kvs[0].ModRevision != rev {
			t.Fatalf("Range(hot) at %d = %v, %v", rev, kvs, err)
		}
		if n, err := r.Count(ctx, []byte("h"), []byte{0}, rev); err != nil || n != 1 {
			t.Fatalf("Count at %d = %d, %v; want 1", rev, n, err)
		}
	}
	cs, err := r.Changes(ctx, 2, 1001, 0, true)
	if err != nil || len(cs) != 1000 {
		t.Fatalf("Changes(2, 1001) = %d changes, %v; want 1000", len(cs), err)
	}
	for _, c := range cs {
		if c.PrevKV == nil || c.PrevKV.ModRevision != c.KV.ModRevision-1 {
			t.Fatalf("change at %d has previous row %v", c.KV.ModRevision, c.PrevKV)
		}
	}
	if cs, err := r.Changes(ctx, 3000, 3000, 0, true); err != nil || len(cs) != 1 ||
		cs[0].PrevKV == nil || string(cs[0].PrevKV.Value) != "v2999" {
		t.Fatalf("Changes(3000, 3000) = %v, %v; want the previous row at 2999", cs, err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("historical reads of one hot key took %v", d)
	} else {
		t.Logf("historical reads of one hot key took %v", d)
	}
}

// TestHistoricalPages: a historical read longer than a page (500 keys)
// goes on from the last key of each page, whether or not the keys it
// passes were deleted, and stops at its limit.
func TestHistoricalPages(t *testing.T) {
	const keys = 1300
	ctx := context.Background()
	b := mustOpen(t, mysqltest.NewDatabase(t))
	var kvs []*mvccpb.KeyValue
	for i := range keys {
		kvs = append(kvs, &mvccpb.KeyValue{Key: fmt.Appendf(nil, "k%05d", i), Value: []byte("v")})
	}
	if err := commitKV(t, b, 1, kvs...); err != nil {
		t.Fatal(err)
	}
	// Revision 2 deletes every key in [400, 1000) and every third other.
	w, err := b.BeginWrite(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var want [][]byte
	sub := int64(0)
	for i := range keys {
		key := fmt.Appendf(nil, "k%05d", i)
		if i >= 400 && i < 1000 || i%3 == 0 {
			if err := w.Delete(ctx, key, 2, sub); err != nil {
				t.Fatal(err)
			}
			sub++
			continue
		}
		want = append(want, key)
	}
	if err := errors.Join(w.SetRevisions(ctx, 2, 0), w.Commit()); err != nil {
		t.Fatal(err)
	}
	if err := commitKV(t, b, 3, &mvccpb.KeyValue{Key: []byte("later"), Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	r, err := b.BeginRead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Rollback()
	for _, limit := range []int64{0, 1, 7, 266, 267, 400, 1000} {
		got, err := r.Range(ctx, []byte("k"), []byte("l"), 2, limit, true)
		if err != nil {
			t.Fatalf("Range at 2 limit %d: %v", limit, err)
		}
		w := want
		if limit > 0 && int64(len(w)) > limit {
			w = w[:limit]
		}
		if len(got) != len(w) {
			t.Fatalf("Range at 2 limit %d: %d keys, want %d", limit, len(got), len(w))
		}
		for i := range got {
			if !bytes.Equal(got[i].Key, w[i]) || got[i].ModRevision != 1 {
				t.Fatalf("Range at 2 limit %d: key %d is %q at %d, want %q at 1", limit, i, got[i].Key, got[i].ModRevision, w[i])
			}
		}
	}
	if n, err := r.Count(ctx, []byte("k"), []byte("l"), 2); err != nil || n != int64(len(want)) {
		t.Errorf("Count at 2 = %d, %v; want %d", n, err, len(want))
	}
	if n, err := r.Count(ctx, nil, []byte{0}, 1); err != nil || n != keys {
		t.Errorf("Count at 1 = %d, %v; want %d", n, err, keys)
	}
}
