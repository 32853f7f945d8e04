package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/kite-db/kite/pkg/mvcc"
)

var _ mvcc.Prefetcher = (*Backend)(nil)

// The applier reads the previous row of every key it writes and evaluates
// every compare with a read; each read here is a round trip to the
// database server. A batch's transaction reads the live rows of all the
// keys the batch names in one statement, sent in the same round trip as
// BEGIN and the revision lock, so a batch of puts or kube-style txns costs
// two round trips (begin, commit) instead of one or two per request.
// Because the transaction holds the revision lock, no other server can
// change those rows until it ends: the rows read stay true, updated by this
// transaction's own writes.

const sqlPrefetch = `SELECT key, create_rev, mod_rev, version, lease, value
	FROM kite_live WHERE key = ANY($1)`

// BeginWritePrefetch implements mvcc.Prefetcher.
func (b *Backend) BeginWritePrefetch(ctx context.Context, keys [][]byte) (mvcc.WriteTx, error) {
	return b.beginWrite(ctx, keys)
}

// queuePrefetch queues the read of keys' live rows into batch; every key
// is known afterwards (nil: no live row).
func (w *writeTx) queuePrefetch(batch *pgx.Batch, keys [][]byte) {
	w.known = make(map[string]*mvccpb.KeyValue, len(keys))
	want := make([][]byte, 0, len(keys))
	for _, k := range keys {
		w.known[string(k)] = nil
		want = append(want, nonNil(k))
	}
	batch.Queue(sqlPrefetch, want).Query(func(rows pgx.Rows) error {
		dec := newKVDecoder(false, int64(len(want)))
		for rows.Next() {
			kv := &mvccpb.KeyValue{}
			if err := dec.decode(rows, kv); err != nil {
				return fmt.Errorf("prefetch: %w", err)
			}
			w.known[string(kv.Key)] = kv
		}
		return rows.Err()
	})
}

// cached returns key's live row as this transaction knows it without a
// read: written by it, or prefetched. ok is false if it does not know.
func (w *writeTx) cached(key []byte) (kv *mvccpb.KeyValue, ok bool) {
	if kv, ok := w.unsent.live(key); ok {
		return kv, true
	}
	kv, ok = w.known[string(key)]
	return kv, ok
}

// remember records key's live row after a write of this transaction, so
// that it stays known once the pending writes are sent.
func (w *writeTx) remember(key []byte, kv *mvccpb.KeyValue) {
	if w.known != nil {
		w.known[string(key)] = kv
	}
}

// Range implements mvcc.ReadTx, answering a latest read of one known key
// from memory (the applier's compares); anything else is read.
func (w *writeTx) Range(ctx context.Context, key, end []byte, rev, limit int64, keysOnly bool) ([]*mvccpb.KeyValue, error) {
	if len(end) == 0 && rev >= w.latest {
		if err := w.check(); err != nil {
			return nil, err
		}
		if kv, ok := w.cached(key); ok {
			if kv == nil {
				return nil, nil
			}
			return []*mvccpb.KeyValue{copyKV(kv, keysOnly)}, nil
		}
	}
	return w.reader.Range(ctx, key, end, rev, limit, keysOnly)
}

// copyKV returns a copy the caller may keep; keysOnly leaves Value empty.
func copyKV(kv *mvccpb.KeyValue, keysOnly bool) *mvccpb.KeyValue {
	c := &mvccpb.KeyValue{Key: kv.Key, CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision,
		Version: kv.Version, Lease: kv.Lease}
	if !keysOnly {
		c.Value = kv.Value
	}
	return c
}
