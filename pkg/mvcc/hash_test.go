package mvcc_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/kite-db/kite/pkg/drivers/sqlite"
	"github.com/kite-db/kite/pkg/mvcc"
)

// lazyCompaction is a Backend whose physical compaction removes nothing:
// a member whose background removal has not got anywhere yet.
type lazyCompaction struct{ mvcc.Backend }

func (b lazyCompaction) BeginWrite(ctx context.Context) (mvcc.WriteTx, error) {
	tx, err := b.Backend.BeginWrite(ctx)
	if err != nil {
		return nil, err
	}
	return lazyTx{tx}, nil
}

type lazyTx struct{ mvcc.WriteTx }

func (lazyTx) CompactBatch(context.Context, int64, int64, int64) (int64, error) { return 0, nil }

// TestHashKVIgnoresPhysicalCompaction: members that applied the same writes
// and the same compaction hash alike whether or not their background
// compaction has removed the rows (raftsql's corruption check compares
// them), as etcd's HashKV hashes only what compaction keeps.
func TestHashKVIgnoresPhysicalCompaction(t *testing.T) {
	ctx := context.Background()
	hash := func(lazy bool) *pb.HashKVResponse {
		sb, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "kite.db"), sqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		var b mvcc.Backend = sb
		if lazy {
			b = lazyCompaction{sb}
		}
		s, err := mvcc.Open(ctx, b, mvcc.Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { s.Close(); sb.Close() }()
		for i := range 40 {
			put(t, s, fmt.Sprintf("k%d", i%6), fmt.Sprint(i), 0)
			if i == 30 {
				if _, err := s.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte("k1")}); err != nil {
					t.Fatal(err)
				}
			}
		}
		if _, err := s.Compact(ctx, &pb.CompactionRequest{Revision: 35, Physical: true}); err != nil {
			t.Fatal(err)
		}
		put(t, s, "k9", "after", 0)
		resp, err := s.HashKV(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	done, lazy := hash(false), hash(true)
	if done.Hash != lazy.Hash || done.CompactRevision != 35 || lazy.CompactRevision != 35 {
		t.Fatalf("HashKV after physical compaction %d (compact rev %d), without it %d (compact rev %d)",
			done.Hash, done.CompactRevision, lazy.Hash, lazy.CompactRevision)
	}
}
