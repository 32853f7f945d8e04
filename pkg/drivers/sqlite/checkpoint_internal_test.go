package sqlite

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Options.CheckpointInterval spaces the background checkpoints: after one,
// the next commit's pages stay in the WAL until the interval has passed.
// The database file grows only when a checkpoint copies new pages into it,
// which is what the test watches; the default interval shows that it does.
func TestCheckpointInterval(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		interval   time.Duration
		checkpoint bool
	}{{0, true}, {time.Hour, false}} {
		path := filepath.Join(t.TempDir(), "kite.db")
		b, err := Open(ctx, path, Options{CheckpointInterval: c.interval})
		if err != nil {
			t.Fatal(err)
		}
		rev := int64(0)
		commit := func(keys int) {
			t.Helper()
			tx, err := b.BeginWrite(ctx)
			if err != nil {
				t.Fatal(err)
			}
			rev++
			for i := range keys {
				kv := &mvccpb.KeyValue{Key: []byte{byte(rev), byte(i >> 8), byte(i)}, Value: bytes.Repeat([]byte{'v'}, 4096),
					ModRevision: rev, CreateRevision: rev, Version: 1}
				if err := tx.Put(ctx, kv, int64(i)); err != nil {
					t.Fatal(err)
				}
			}
			if err := tx.SetRevisions(ctx, rev, 0); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
		}
		size := func() int64 {
			t.Helper()
			st, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			return st.Size()
		}
		// The first commit is checkpointed at once, whatever the interval.
		commit(1)
		before := size()
		for deadline := time.Now().Add(5 * time.Second); size() == before && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(100 * time.Millisecond)
		before = size()
		commit(200) // about 200 new pages, below the writer's own bound
		grew := false
		for deadline := time.Now().Add(2 * time.Second); !grew && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
			grew = size() > before
		}
		if grew != c.checkpoint {
			t.Errorf("CheckpointInterval %v: database file grew %v within 2 s of a commit after a checkpoint, want %v", c.interval, grew, c.checkpoint)
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
