package memtail

import (
	"context"
	"errors"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/kite-db/kite/pkg/mvcc"
)

var (
	_ mvcc.WriteTx        = (*writeTx)(nil)
	_ mvcc.AppliedIndexTx = (*writeTx)(nil)
)

// writeTx collects its calls in an open batch at the end of its view, so
// its reads see its own writes; Commit puts the batch in the tail.
type writeTx struct {
	view
	b     *Backend
	open  *batch
	index uint64 // set by SetAppliedIndex, else the Backend numbers the batch
	// direct is the base's write transaction a CompactBatch opened; the
	// rest of the transaction happens in it.
	direct mvcc.WriteTx
	// seen: keys whose liveness in the base this transaction read.
	seen map[string]bool
	// err is the first refused change: the transaction commits nothing.
	err  error
	done bool
}

func (w *writeTx) add(o op) error {
	if w.done {
		return errors.New("memtail: write transaction already ended")
	}
	if w.err != nil {
		return w.err
	}
	if o.kind == opPut || o.kind == opDelete {
		// The base refuses some changes (more than a revision can hold);
		// it must refuse them now, not when the flush replays them.
		if c, ok := w.b.base.(changeChecker); ok {
			if err := c.CheckChange(o.kv.ModRevision, o.sub); err != nil {
				w.err = err
				return err
			}
		}
	}
	if w.direct != nil {
		if err := o.replay(context.Background(), w.direct); err != nil {
			w.err = err
			return err
		}
	}
	w.open.add(o)
	return nil
}

// changeChecker is the part of a Base that refuses a change before it is
// written (sqlite.Backend).
type changeChecker interface {
	CheckChange(rev, sub int64) error
}

// Put implements mvcc.WriteTx.
func (w *writeTx) Put(ctx context.Context, kv *mvccpb.KeyValue, sub int64) error {
	live, err := w.liveBefore(ctx, kv.Key, kv.Version)
	if err != nil {
		return err
	}
	// A copy: the caller keeps its row (and hands it to watchers).
	return w.add(op{kind: opPut, kv: clone(kv), sub: sub, liveBefore: live})
}

// Delete implements mvcc.WriteTx.
func (w *writeTx) Delete(ctx context.Context, key []byte, rev, sub int64) error {
	live, err := w.liveBefore(ctx, key, 0)
	if err != nil {
		return err
	}
	return w.add(op{kind: opDelete, kv: &mvccpb.KeyValue{Key: key, ModRevision: rev}, sub: sub, liveBefore: live})
}

// liveBefore says whether key is live as the transaction sees it now. A
// put of version 1 is a creation; otherwise the tail decides if it holds
// the key, else the base, as the transaction's own reads last found it
// (the Store reads every key it changes first), else by a read.
func (w *writeTx) liveBefore(ctx context.Context, key []byte, version int64) (bool, error) {
	if version == 1 || w.direct != nil {
		// Once direct, the batch never joins the tail: no read merges it.
		return false, nil
	}
	if o, ok := w.newest(string(key), maxRev); ok {
		_, live := o.live()
		return live, nil
	}
	if live, ok := w.seen[string(key)]; ok {
		return live, nil
	}
	kv, err := w.view.base.Get(ctx, key)
	if err != nil {
		w.err = err
		return false, err
	}
	return kv != nil, nil
}

// Get implements mvcc.ReadTx, remembering what the base said.
func (w *writeTx) Get(ctx context.Context, key []byte) (*mvccpb.KeyValue, error) {
	if w.direct != nil {
		return w.direct.Get(ctx, key)
	}
	if _, ok := w.newest(string(key), maxRev); ok {
		return w.view.Get(ctx, key)
	}
	kv, err := w.view.base.Get(ctx, key)
	if err == nil {
		w.seen[string(key)] = kv != nil
	}
	return kv, err
}

// SetRevisions implements mvcc.WriteTx.
func (w *writeTx) SetRevisions(_ context.Context, current, compacted int64) error {
	return w.add(op{kind: opSetRevisions, current: current, compacted: compacted})
}

// PutLease implements mvcc.WriteTx.
func (w *writeTx) PutLease(_ context.Context, l mvcc.Lease) error {
	return w.add(op{kind: opPutLease, lease: l})
}

// DeleteLease implements mvcc.WriteTx.
func (w *writeTx) DeleteLease(_ context.Context, id int64) error {
	return w.add(op{kind: opDeleteLease, lease: mvcc.Lease{ID: id}})
}

// PutAuthState implements mvcc.WriteTx.
func (w *writeTx) PutAuthState(_ context.Context, state []byte) error {
	return w.add(op{kind: opPutAuth, auth: append([]byte{}, state...)})
}

// PutAlarm implements mvcc.WriteTx.
func (w *writeTx) PutAlarm(_ context.Context, a *pb.AlarmMember) error {
	return w.add(op{kind: opPutAlarm, alarm: a})
}

// DeleteAlarm implements mvcc.WriteTx.
func (w *writeTx) DeleteAlarm(_ context.Context, a *pb.AlarmMember) error {
	return w.add(op{kind: opDeleteAlarm, alarm: a})
}

// SetAppliedIndex implements mvcc.AppliedIndexTx: a replicated log's
// entry index numbers the batch, so the wrapped Backend records it when
// the batch is flushed.
func (w *writeTx) SetAppliedIndex(_ context.Context, index uint64) error {
	if w.done {
		return errors.New("memtail: write transaction already ended")
	}
	w.index = index
	return nil
}

// CompactBatch implements mvcc.WriteTx. Its caller paces compaction by
// the rows it removes, and only the base knows them, so the transaction
// turns into one of the base: the tail is flushed (the base then holds
// every row the compaction judges), a base transaction is begun, what
// this one wrote so far is replayed into it, and from then on its writes
// and reads go there too; it commits there, after the log has it (with
// its compactions, so a replay does them again).
func (w *writeTx) CompactBatch(ctx context.Context, compacted, fromRev, toRev int64) (int64, error) {
	if w.done {
		return 0, errors.New("memtail: write transaction already ended")
	}
	if w.err != nil {
		return 0, w.err
	}
	if w.direct == nil {
		if err := w.b.flush(ctx); err != nil {
			return 0, err
		}
		tx, err := w.b.base.BeginWrite(ctx)
		if err != nil {
			return 0, fmt.Errorf("memtail: compact: %w", err)
		}
		w.direct = tx
		for i := range w.open.ops {
			if err := w.open.ops[i].replay(ctx, tx); err != nil {
				w.err = err
				return 0, err
			}
		}
	}
	n, err := w.direct.CompactBatch(ctx, compacted, fromRev, toRev)
	if err != nil {
		w.err = err
		return 0, err
	}
	w.open.add(op{kind: opCompact, compacted: compacted, from: fromRev, to: toRev})
	return n, nil
}

// reader is what this transaction reads from: the base's transaction once
// a CompactBatch made it one, else the view.
func (w *writeTx) reader() mvcc.ReadTx {
	if w.direct != nil {
		return w.direct
	}
	return &w.view
}

// Revisions implements mvcc.ReadTx.
func (w *writeTx) Revisions(ctx context.Context) (int64, int64, error) {
	return w.reader().Revisions(ctx)
}

// Count implements mvcc.ReadTx.
func (w *writeTx) Count(ctx context.Context, key, end []byte, rev int64) (int64, error) {
	return w.reader().Count(ctx, key, end, rev)
}

// Changes implements mvcc.ReadTx.
func (w *writeTx) Changes(ctx context.Context, fromRev, toRev int64, limit int, withPrev bool) ([]mvcc.Change, error) {
	return w.reader().Changes(ctx, fromRev, toRev, limit, withPrev)
}

// Leases implements mvcc.ReadTx.
func (w *writeTx) Leases(ctx context.Context) ([]mvcc.Lease, error) { return w.reader().Leases(ctx) }

// Lease implements mvcc.ReadTx.
func (w *writeTx) Lease(ctx context.Context, id int64) (mvcc.Lease, bool, error) {
	return w.reader().Lease(ctx, id)
}

// Alarms implements mvcc.ReadTx.
func (w *writeTx) Alarms(ctx context.Context) ([]*pb.AlarmMember, error) {
	return w.reader().Alarms(ctx)
}

// LeaseKeys implements mvcc.ReadTx.
func (w *writeTx) LeaseKeys(ctx context.Context, id int64) ([][]byte, error) {
	return w.reader().LeaseKeys(ctx, id)
}

// AuthState implements mvcc.ReadTx.
func (w *writeTx) AuthState(ctx context.Context) ([]byte, error) { return w.reader().AuthState(ctx) }

// Commit implements mvcc.WriteTx: the batch joins the tail, where every
// read begun after it sees it; or, after a CompactBatch, it commits
// straight into the base with the compaction.
func (w *writeTx) Commit() error {
	if w.done {
		return errors.New("memtail: commit: write transaction already ended")
	}
	defer w.end()
	if w.err != nil {
		return fmt.Errorf("memtail: commit: %w", w.err)
	}
	if w.direct != nil {
		return w.b.commitDirect(w.direct, w.open, w.index)
	}
	if len(w.open.ops) == 0 {
		return nil
	}
	return w.b.append(w.open, w.index)
}

// Rollback implements mvcc.WriteTx.
func (w *writeTx) Rollback() error {
	if w.done {
		return nil
	}
	w.end()
	return nil
}

func (w *writeTx) end() {
	w.done = true
	if w.direct != nil {
		_ = w.direct.Rollback() // a no-op after its commit
	}
	_ = w.base.Rollback()
	w.b.unlockWriter()
}

// Range implements mvcc.ReadTx, remembering the keys a latest read found
// live (the Store ranges over the keys a delete removes).
func (w *writeTx) Range(ctx context.Context, key, end []byte, rev, limit int64, keysOnly bool) ([]*mvccpb.KeyValue, error) {
	if w.direct != nil {
		return w.direct.Range(ctx, key, end, rev, limit, keysOnly)
	}
	kvs, err := w.view.Range(ctx, key, end, rev, limit, keysOnly)
	if err != nil {
		return nil, err
	}
	if cur, _, _ := w.Revisions(ctx); rev == cur {
		for _, kv := range kvs {
			if _, inTail := w.newest(string(kv.Key), maxRev); !inTail {
				w.seen[string(kv.Key)] = true
			}
		}
	}
	return kvs, nil
}
