package memtail_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/kite-db/kite/pkg/mvcc"
	"github.com/kite-db/kite/pkg/mvcc/memtail"
)

// TestRowCacheKeepsNoValuesNobodyAsks: a Store over memtail whose puts
// nobody asks the previous value of (no prev_kv in the request, no prev_kv
// watcher) leaves its row cache without the values, which were most of
// its memory; with a prev_kv watcher open the cache keeps them, so that
// the next put's previous row is read from memory whole. What the
// watcher receives is checked against etcd in test/ and by
// TestWatchPartialPrevFromTheLog; here only where the values live.
func TestRowCacheKeepsNoValuesNobodyAsks(t *testing.T) {
	ctx := context.Background()
	o := &opener{opts: policies[0].opts, paths: map[mvcc.Backend]string{}}
	b := o.at(t, filepath.Join(t.TempDir(), "kite.db"))
	s, err := mvcc.Open(ctx, b, mvcc.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const keys, size = 50, 1000
	value := make([]byte, size)
	putAll := func() {
		t.Helper()
		for i := range keys {
			if _, err := s.Put(ctx, &pb.PutRequest{Key: []byte(fmt.Sprint("k", i)), Value: value}); err != nil {
				t.Fatal(err)
			}
		}
	}
	putAll() // creations: nothing read, the rows are cached whole
	putAll() // updates: their previous rows read without values
	tb := b.(*memtail.Backend)
	if n := memtail.RowCacheValueBytes(tb); n != 0 {
		t.Errorf("after updates nobody asked the previous value of, the row cache holds %d bytes of values, want 0", n)
	}

	ws := s.NewWatchStream()
	defer ws.Close()
	ws.Watch(&pb.WatchCreateRequest{Key: []byte("k"), RangeEnd: []byte("l"), PrevKv: true})
	select {
	case r := <-ws.Responses():
		if !r.Created {
			t.Fatalf("want created, got %v", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("watch not created")
	}
	putAll()
	if n := memtail.RowCacheValueBytes(tb); n != keys*size {
		t.Errorf("after updates with a prev_kv watcher, the row cache holds %d bytes of values, want %d", n, keys*size)
	}
}
