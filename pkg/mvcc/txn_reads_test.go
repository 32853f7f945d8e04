package mvcc_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/kite-db/kite/pkg/drivers/sqlite"
	"github.com/kite-db/kite/pkg/mvcc"
)

// readCounter is a real SQLite backend whose write transactions count the
// reads the evaluator makes through them.
type readCounter struct {
	mvcc.Backend
	mu           sync.Mutex
	gets, ranges int
}

func (b *readCounter) BeginWrite(ctx context.Context) (mvcc.WriteTx, error) {
	tx, err := b.Backend.BeginWrite(ctx)
	if err != nil {
		return nil, err
	}
	return &readCountingTx{WriteTx: tx, b: b}, nil
}

func (b *readCounter) reset() (gets, ranges int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	gets, ranges = b.gets, b.ranges
	b.gets, b.ranges = 0, 0
	return gets, ranges
}

type readCountingTx struct {
	mvcc.WriteTx
	b *readCounter
}

func (t *readCountingTx) Get(ctx context.Context, key []byte) (*mvccpb.KeyValue, error) {
	t.b.mu.Lock()
	t.b.gets++
	t.b.mu.Unlock()
	return t.WriteTx.Get(ctx, key)
}

func (t *readCountingTx) Range(ctx context.Context, key, end []byte, rev, limit int64, keysOnly bool) ([]*mvccpb.KeyValue, error) {
	t.b.mu.Lock()
	t.b.ranges++
	t.b.mu.Unlock()
	return t.WriteTx.Range(ctx, key, end, rev, limit, keysOnly)
}

// kube-apiserver's update (compare the key's mod revision, put it, else get
// it) reads the key's row once, and both branches still answer as etcd
// does: the put's version follows the row the compare saw, and a failed
// compare leaves the key alone.
func TestTxnReadsAKeyOnce(t *testing.T) {
	ctx := context.Background()
	be, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "kite.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b := &readCounter{Backend: be}
	s, err := mvcc.Open(ctx, b, mvcc.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(); be.Close() })
	rev := put(t, s, "/registry/pods/ns/p", "v1", 0)
	update := func(modRev int64, value string) *pb.TxnResponse {
		t.Helper()
		key := []byte("/registry/pods/ns/p")
		resp, err := s.Txn(ctx, &pb.TxnRequest{
			Compare: []*pb.Compare{{Key: key, Target: pb.Compare_MOD, Result: pb.Compare_EQUAL,
				TargetUnion: &pb.Compare_ModRevision{ModRevision: modRev}}},
			Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: key, Value: []byte(value)}}}},
			Failure: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: key}}}},
		})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	b.reset()
	if resp := update(rev, "v2"); !resp.Succeeded {
		t.Fatalf("update at the key's mod revision failed: %v", resp)
	}
	if gets, ranges := b.reset(); gets != 1 || ranges != 0 {
		t.Fatalf("the update read the key %d times by Get and %d by Range, want one Get", gets, ranges)
	}
	got, err := s.Range(ctx, &pb.RangeRequest{Key: []byte("/registry/pods/ns/p")})
	if err != nil || len(got.Kvs) != 1 || got.Kvs[0].Version != 2 || got.Kvs[0].CreateRevision != rev || string(got.Kvs[0].Value) != "v2" {
		t.Fatalf("after the update: %v, %v", got, err)
	}
	resp := update(rev, "v3") // stale: the failure branch reads the row
	if resp.Succeeded || len(resp.Responses) != 1 || string(resp.Responses[0].GetResponseRange().Kvs[0].Value) != "v2" {
		t.Fatalf("stale update: %v", resp)
	}
}
