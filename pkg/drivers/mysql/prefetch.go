package mysql

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/kite-db/kite/pkg/mvcc"
)

var _ mvcc.Prefetcher = (*Backend)(nil)

// The applier reads the previous row of every key it writes and evaluates
// every compare with a read; each read here is a round trip to the
// database server. A batch's transaction reads the live rows of all the
// keys the batch names in one statement, sent in the same round trip as
// the start of the transaction and the revision lock, so a batch of puts
// costs two round trips (begin, commit) instead of one more per key.
// Because the transaction holds the revision lock, no other writer can
// change those rows until it ends: the rows read stay true, updated by
// this transaction's own writes.

// BeginWritePrefetch implements mvcc.Prefetcher.
func (b *Backend) BeginWritePrefetch(ctx context.Context, keys [][]byte) (mvcc.WriteTx, error) {
	return b.beginWrite(ctx, keys)
}

// prefetchSQL reads the live rows of n keys.
func prefetchSQL(n int) string {
	return `SELECT k, create_rev, mod_rev, version, lease, value FROM kite_live WHERE k IN (` +
		strings.Repeat("?, ", n-1) + `?)`
}

// lockAndPrefetch locks the revision row and reads keys' live rows in the
// same query as the start of the transaction; every key is known
// afterwards (nil: no live row), up to what fits in half a statement:
// the rest are read as usual. Keys too long to be stored are known to
// have none without asking.
func (w *writeTx) lockAndPrefetch(ctx context.Context, keys [][]byte) (err error) {
	w.known = make(map[string]*mvccpb.KeyValue, len(keys))
	var args []any
	budget := w.packet / 4
	for _, k := range keys {
		if budget -= argSize(k); budget < 0 {
			break
		}
		w.known[string(k)] = nil
		if len(k) <= maxKeyLen {
			args = append(args, nonNil(k))
		}
	}
	query := sqlLockRevisions
	if len(args) > 0 {
		query += "; " + prefetchSQL(len(args))
	}
	rows, err := queryAfter(ctx, w.conn, w.b.beginWriteSQL(), nil, query, args)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, rows.Close()) }()
	if !rows.Next() {
		return errors.Join(errors.New("no revision row"), rows.Err())
	}
	var h History
	if err := rows.Scan(append([]any{&w.current, &w.compacted}, h.scanTargets()...)...); err != nil {
		return err
	}
	h.Rev = w.current
	if err := w.b.checkHistory(h); err != nil {
		return err
	}
	if len(args) == 0 {
		return nil
	}
	if rows.Next() || !rows.NextResultSet() {
		return errors.Join(errors.New("prefetch: no result"), rows.Err())
	}
	for rows.Next() {
		kv := &mvccpb.KeyValue{}
		if err := rows.Scan(&kv.Key, &kv.CreateRevision, &kv.ModRevision, &kv.Version, &kv.Lease, &kv.Value); err != nil {
			return fmt.Errorf("prefetch: %w", err)
		}
		w.known[string(kv.Key)] = kv
	}
	return rows.Err()
}

// cached returns key's live row as this transaction knows it without a
// read: written by it and not sent yet, or prefetched (and kept up to
// date by remember). ok is false if it does not know.
func (w *writeTx) cached(key []byte) (kv *mvccpb.KeyValue, ok bool) {
	if kv, ok := w.pend.liveRow(key); ok {
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
