package mvcc_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/kite-db/kite/pkg/drivers/sqlite"
	"github.com/kite-db/kite/pkg/mvcc"
)

// historyRecorder counts the reads of the log's changes, which the watch
// hub makes only for revisions its ring of recent events no longer holds.
type historyRecorder struct {
	*sqlite.Backend
	reads atomic.Int64
}

func (r *historyRecorder) BeginRead(ctx context.Context) (mvcc.ReadTx, error) {
	tx, err := r.Backend.BeginRead(ctx)
	if err != nil {
		return nil, err
	}
	return &historyReadTx{ReadTx: tx, r: r}, nil
}

type historyReadTx struct {
	mvcc.ReadTx
	r *historyRecorder
}

func (t *historyReadTx) Changes(ctx context.Context, fromRev, toRev int64, limit int, withPrev bool) ([]mvcc.Change, error) {
	t.r.reads.Add(1)
	return t.ReadTx.Changes(ctx, fromRev, toRev, limit, withPrev)
}

// Config.WatchRingBytes bounds the recent events kept in memory: a watcher
// starting ten revisions of 1 KiB values back is served from memory with
// the default bound, and from the log when the bound holds less than that.
func TestWatchRingBytesBoundsRecentEvents(t *testing.T) {
	for _, tc := range []struct {
		ringBytes   int64
		fromHistory bool
	}{{0, false}, {4 << 10, true}} {
		t.Run(fmt.Sprint(tc.ringBytes), func(t *testing.T) {
			ctx := context.Background()
			b, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "kite.db"), sqlite.Options{})
			if err != nil {
				t.Fatal(err)
			}
			rec := &historyRecorder{Backend: b}
			s, err := mvcc.Open(ctx, rec, mvcc.Config{WatchRingBytes: tc.ringBytes})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close(); b.Close() })
			value := string(make([]byte, 1024))
			var first int64
			for i := range 10 {
				rev := put(t, s, fmt.Sprintf("/w/%d", i), value, 0)
				if i == 0 {
					first = rev
				}
			}
			before := rec.reads.Load()
			ws := s.NewWatchStream()
			defer ws.Close()
			ws.Watch(&pb.WatchCreateRequest{Key: []byte("/w/"), RangeEnd: []byte("/w0"), StartRevision: first})
			events := 0
			deadline := time.After(10 * time.Second)
			for events < 10 {
				select {
				case r := <-ws.Responses():
					events += len(r.Events)
				case <-deadline:
					t.Fatalf("%d of 10 events within 10 s", events)
				}
			}
			if got := rec.reads.Load() > before; got != tc.fromHistory {
				t.Fatalf("ring of %d bytes: events read from the log %v, want %v", tc.ringBytes, got, tc.fromHistory)
			}
		})
	}
}
