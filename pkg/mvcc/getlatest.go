package mvcc

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// getLatest serves a Range of one key at the latest revision (what a get
// is) from Backend.GetLatest: one read of the row and the revisions, no
// transaction. The answer is built by executeRange, over a ReadTx that
// holds just that row, so it follows the same rules as every other Range.
func (s *Store) getLatest(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	if err := s.guard.lost(); err != nil {
		return nil, err
	}
	published := s.current.Load()
	kv, current, compacted, err := s.b.GetLatest(ctx, r.Key)
	if err != nil {
		return nil, s.guard.note(fmt.Errorf("get latest: %w", err))
	}
	if err := s.guard.behind(current, published); err != nil {
		return nil, err
	}
	return executeRange(ctx, &oneKeyTx{key: r.Key, kv: kv, current: current}, r, current, compacted, true)
}

var errOneKey = errors.New("mvcc: read beyond the single key of a latest get")

// oneKeyTx is the rangeReader of a latest single-key read: the key's live
// row (nil when absent) at revision current. executeRange asks it only for
// Range or Count of that key at that revision; anything else is an error
// rather than a wrong answer.
type oneKeyTx struct {
	key     []byte
	kv      *mvccpb.KeyValue
	current int64
}

func (t *oneKeyTx) check(key, end []byte, rev int64) error {
	if len(end) != 0 || rev != t.current || !bytes.Equal(key, t.key) {
		return errOneKey
	}
	return nil
}

func (t *oneKeyTx) Range(_ context.Context, key, end []byte, rev, _ int64, keysOnly bool) ([]*mvccpb.KeyValue, error) {
	if err := t.check(key, end, rev); err != nil {
		return nil, err
	}
	if t.kv == nil {
		return nil, nil
	}
	if keysOnly {
		t.kv.Value = nil
	}
	return []*mvccpb.KeyValue{t.kv}, nil
}

func (t *oneKeyTx) Count(_ context.Context, key, end []byte, rev int64) (int64, error) {
	if err := t.check(key, end, rev); err != nil {
		return 0, err
	}
	if t.kv == nil {
		return 0, nil
	}
	return 1, nil
}
