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
	_ mvcc.RowMetaReader  = (*writeTx)(nil)
)

// writeTx collects its calls in an open batch at the end of its view, so
// its reads see its own writes; Commit puts the batch in the tail.
//
// Its read of the base is opened only when a read needs it (baseRead):
// the rows the writer replaces are mostly in the tail or the Backend's
// row cache, and a read of the base costs a read connection, a BEGIN and
// two statements before the first row. Until then its view holds the
// whole tail, which answers a key's newest row and the newest revisions
// as well as the part after the base's applied index does.
type writeTx struct {
	view
	b    *Backend
	open *batch
	tail []*batch // the tail when the transaction began
	// newestRev is the highest revision of a change in the open batch: a
	// read at or above it and the head's sees the newest rows. The Store
	// sets the revisions once per batch, at its end, and reads at the
	// revision its earlier requests in the batch wrote.
	newestRev int64
	index     uint64 // set by SetAppliedIndex, else the Backend numbers the batch
	// direct is the base's write transaction a CompactBatch opened; the
	// rest of the transaction happens in it.
	direct mvcc.AppliedWriteTx
	// seen: keys whose liveness in the base this transaction read.
	seen map[string]bool
	// fills: rows read from the base, for the row cache once the
	// transaction commits; used: keys the row cache answered, made its
	// newest then. A transaction that does not commit leaves the cache as
	// it was.
	fills map[string]*mvccpb.KeyValue
	used  []string
	// metaOnly: keys whose rows the transaction read only without their
	// values (GetMeta); the rows it leaves them are cached so too.
	metaOnly map[string]bool
	// before: whether each key the transaction changed was live before
	// it, for the live-key set once it commits.
	before map[string]bool
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
		if err := w.b.base.CheckChange(o.kv.ModRevision, o.sub); err != nil {
			w.err = err
			return err
		}
	}
	if w.direct != nil {
		if err := o.replay(context.Background(), w.direct); err != nil {
			w.err = err
			return err
		}
	}
	if o.kind == opPut || o.kind == opDelete {
		w.newestRev = max(w.newestRev, o.kv.ModRevision)
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
	if err == nil {
		err = w.noteBefore(ctx, kv.Key, live)
	}
	if err != nil {
		return err
	}
	// A copy: the caller keeps its row (and hands it to watchers).
	return w.add(op{kind: opPut, kv: clone(kv), sub: sub, liveBefore: live})
}

// Delete implements mvcc.WriteTx.
func (w *writeTx) Delete(ctx context.Context, key []byte, rev, sub int64) error {
	live, err := w.liveBefore(ctx, key, 0)
	if err == nil {
		err = w.noteBefore(ctx, key, live)
	}
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
	k := string(key)
	if o, ok := w.open.keyAt(k, maxRev); ok {
		_, live := o.live()
		return live, nil
	}
	if kv, ok := w.b.rows.getMeta(k); ok {
		return kv != nil, nil
	}
	if o, ok := w.newest(k, maxRev); ok {
		_, live := o.live()
		return live, nil
	}
	if live, ok := w.seen[k]; ok {
		return live, nil
	}
	if !w.b.live.mayHold(k) {
		return false, nil
	}
	if err := w.baseRead(ctx); err != nil {
		w.err = err
		return false, err
	}
	kv, err := w.view.base.Get(ctx, key)
	if err != nil {
		w.err = err
		return false, err
	}
	return kv != nil, nil
}

// noteBefore records, at the transaction's first change of key, whether
// the key was live before the transaction (live, as liveBefore found it).
// A transaction turned into one of the base (CompactBatch) asks the base:
// liveBefore does not read there.
func (w *writeTx) noteBefore(ctx context.Context, key []byte, live bool) error {
	k := string(key)
	if _, ok := w.before[k]; ok {
		return nil
	}
	if w.direct != nil {
		kv, err := w.direct.Get(ctx, key)
		if err != nil {
			w.err = err
			return err
		}
		live = kv != nil
	}
	w.before[k] = live
	return nil
}

// liveAfter says whether key, which the transaction changed, is live at
// its end.
func (w *writeTx) liveAfter(key string) bool {
	if o, ok := w.open.keyAt(key, maxRev); ok {
		_, live := o.live()
		return live
	}
	return w.before[key]
}

// Get implements mvcc.ReadTx: from the transaction's own writes, else the
// row cache, else the tail, else (unless the key is certainly not live)
// the base, remembering what the base said.
// The cache holds the newest committed row of a key, as the tail does,
// but in one lookup instead of one per batch.
func (w *writeTx) Get(ctx context.Context, key []byte) (*mvccpb.KeyValue, error) {
	return w.read(ctx, key, true)
}

// GetMeta implements mvcc.RowMetaReader: Get for a put or delete that
// needs no value, answered by a row the cache keeps without one too.
func (w *writeTx) GetMeta(ctx context.Context, key []byte) (*mvccpb.KeyValue, error) {
	return w.read(ctx, key, false)
}

// read is Get (whole) or GetMeta. The rows it returns are the caller's.
func (w *writeTx) read(ctx context.Context, key []byte, whole bool) (*mvccpb.KeyValue, error) {
	out := withoutValue
	if whole {
		out = clone
	}
	if w.direct != nil {
		kv, err := w.direct.Get(ctx, key)
		if whole {
			return kv, err
		}
		return withoutValue(kv), err
	}
	k := string(key)
	if whole {
		w.metaOnly[k] = false
	} else if _, ok := w.metaOnly[k]; !ok {
		w.metaOnly[k] = true
	}
	if o, ok := w.open.keyAt(k, maxRev); ok {
		kv, _ := o.live()
		return out(kv), nil
	}
	cached, ok := w.b.rows.getMeta(k)
	if whole {
		cached, ok = w.b.rows.get(k)
	}
	if ok {
		w.seen[k] = cached != nil
		w.used = append(w.used, k)
		return out(cached), nil
	}
	if o, ok := w.newest(k, maxRev); ok {
		kv, _ := o.live()
		return out(kv), nil
	}
	if !w.b.live.mayHold(k) {
		// A creation: nothing to read.
		w.seen[k] = false
		return nil, nil
	}
	if err := w.baseRead(ctx); err != nil {
		return nil, err
	}
	get := w.view.base.Get
	if m, ok := w.view.base.(mvcc.RowMetaReader); ok && !whole {
		get = m.GetMeta // SQLite's: the row without its value
	}
	kv, err := get(ctx, key)
	if err != nil {
		return nil, err
	}
	w.seen[k] = kv != nil
	// A copy for the cache. A whole row a Get of this transaction read
	// stays: remember caches it whole.
	if _, filled := w.fills[k]; whole || !filled {
		w.fills[k] = out(kv)
	}
	if !whole {
		return withoutValue(kv), nil // a base without GetMeta gave the value
	}
	return kv, nil
}

// baseRead opens the transaction's read of the base, if it has none yet,
// and leaves in its view only the batches that read does not hold. The
// base may have taken in flushes since the transaction began; the writer
// lock keeps any batch from being added meanwhile, so the batches after
// its applied index are still all in w.tail.
func (w *writeTx) baseRead(ctx context.Context) error {
	if w.view.base != nil {
		return nil
	}
	base, err := w.b.base.BeginAppliedRead(ctx)
	if err != nil {
		return fmt.Errorf("memtail: read the storage: %w", err)
	}
	v, err := w.b.newView(ctx, base, w.tail)
	if err != nil {
		return errors.Join(err, base.Rollback())
	}
	v.batches = append(v.batches[:len(v.batches):len(v.batches)], w.open)
	w.view = *v
	return nil
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
		tx, err := w.b.base.BeginAppliedWrite(ctx)
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
// a CompactBatch made it one, else the view, with its read of the base.
func (w *writeTx) reader(ctx context.Context) (mvcc.ReadTx, error) {
	if w.direct != nil {
		return w.direct, nil
	}
	if err := w.baseRead(ctx); err != nil {
		return nil, err
	}
	return &w.view, nil
}

// Revisions implements mvcc.ReadTx: the newest batch that set them, else
// the Backend's record of the head, else the base's.
func (w *writeTx) Revisions(ctx context.Context) (int64, int64, error) {
	if w.direct != nil {
		return w.direct.Revisions(ctx)
	}
	for i := len(w.batches) - 1; i >= 0; i-- {
		if bt := w.batches[i]; bt.revs >= 0 {
			o := &bt.ops[bt.revs]
			return o.current, o.compacted, nil
		}
	}
	if h := w.b.head; h.known {
		return h.current, h.compacted, nil
	}
	if err := w.baseRead(ctx); err != nil {
		return 0, 0, err
	}
	cur, comp, err := w.view.Revisions(ctx)
	if err == nil {
		// No batch set them since the base's state: the base's are the
		// head's, whether or not this transaction commits.
		w.b.head = headRevisions{current: cur, compacted: comp, known: true}
	}
	return cur, comp, err
}

// Count implements mvcc.ReadTx.
func (w *writeTx) Count(ctx context.Context, key, end []byte, rev int64) (int64, error) {
	r, err := w.reader(ctx)
	if err != nil {
		return 0, err
	}
	return r.Count(ctx, key, end, rev)
}

// Changes implements mvcc.ReadTx.
func (w *writeTx) Changes(ctx context.Context, fromRev, toRev int64, limit int, withPrev bool) ([]mvcc.Change, error) {
	r, err := w.reader(ctx)
	if err != nil {
		return nil, err
	}
	return r.Changes(ctx, fromRev, toRev, limit, withPrev)
}

// Leases implements mvcc.ReadTx.
func (w *writeTx) Leases(ctx context.Context) ([]mvcc.Lease, error) {
	r, err := w.reader(ctx)
	if err != nil {
		return nil, err
	}
	return r.Leases(ctx)
}

// Lease implements mvcc.ReadTx.
func (w *writeTx) Lease(ctx context.Context, id int64) (mvcc.Lease, bool, error) {
	r, err := w.reader(ctx)
	if err != nil {
		return mvcc.Lease{}, false, err
	}
	return r.Lease(ctx, id)
}

// Alarms implements mvcc.ReadTx.
func (w *writeTx) Alarms(ctx context.Context) ([]*pb.AlarmMember, error) {
	r, err := w.reader(ctx)
	if err != nil {
		return nil, err
	}
	return r.Alarms(ctx)
}

// LeaseKeys implements mvcc.ReadTx.
func (w *writeTx) LeaseKeys(ctx context.Context, id int64) ([][]byte, error) {
	r, err := w.reader(ctx)
	if err != nil {
		return nil, err
	}
	return r.LeaseKeys(ctx, id)
}

// AuthState implements mvcc.ReadTx.
func (w *writeTx) AuthState(ctx context.Context) ([]byte, error) {
	r, err := w.reader(ctx)
	if err != nil {
		return nil, err
	}
	return r.AuthState(ctx)
}

// Commit implements mvcc.WriteTx: the batch joins the tail, where every
// read begun after it sees it; or, after a CompactBatch, it commits
// straight into the base with the compaction.
func (w *writeTx) Commit() error {
	if w.done {
		return errors.New("memtail: commit: write transaction already ended")
	}
	defer w.end()
	if w.err != nil {
		// Nothing was committed: the row cache stays as it was.
		return fmt.Errorf("memtail: commit: %w", w.err)
	}
	var err error
	switch {
	case w.direct != nil:
		err = w.b.commitDirect(w.direct, w.open, w.index)
	case len(w.open.ops) > 0:
		err = w.b.append(w.open, w.index)
	}
	if err != nil {
		// The batch may or may not be in the state now (a base commit
		// that failed half-way): forget what the writer knew.
		w.b.rows.reset()
		w.b.head = headRevisions{}
		w.b.live.changed(w.before, w.liveAfter, false)
		return err
	}
	w.b.live.changed(w.before, w.liveAfter, true)
	w.remember()
	return nil
}

// remember puts in the row cache what the committed transaction read from
// the base and the rows it left, and records the revisions it set.
func (w *writeTx) remember() {
	rows := w.b.rows
	for k, kv := range w.fills {
		if w.metaOnly[k] {
			rows.setMeta(k, kv)
		} else {
			rows.set(k, kv)
		}
	}
	for _, k := range w.used {
		rows.touch(k)
	}
	for k := range w.open.byKey {
		o, _ := w.open.keyAt(k, maxRev)
		kv, _ := o.live()
		if w.metaOnly[k] {
			rows.setMeta(k, kv)
		} else {
			rows.set(k, kv)
		}
	}
	if w.open.revs >= 0 {
		o := &w.open.ops[w.open.revs]
		w.b.head = headRevisions{current: o.current, compacted: o.compacted, known: true}
	}
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
	if w.view.base != nil {
		_ = w.view.base.Rollback()
	}
	w.b.unlockWriter()
}

// Range implements mvcc.ReadTx, remembering the keys a latest read found
// live (the Store ranges over the keys a delete removes).
//
// A range of one key at or above the newest revision (a delete of one
// key, a txn's compare) is a Get: it is answered from the tail or the row
// cache when they hold the key, and it does not scan the tail's keys for
// the ones in range.
func (w *writeTx) Range(ctx context.Context, key, end []byte, rev, limit int64, keysOnly bool) ([]*mvccpb.KeyValue, error) {
	if w.direct != nil {
		return w.direct.Range(ctx, key, end, rev, limit, keysOnly)
	}
	cur, _, err := w.Revisions(ctx)
	if err != nil {
		return nil, err
	}
	if len(end) == 0 && rev >= cur && rev >= w.newestRev {
		kv, err := w.read(ctx, key, !keysOnly)
		if err != nil || kv == nil {
			return nil, err
		}
		return []*mvccpb.KeyValue{kv}, nil
	}
	if err := w.baseRead(ctx); err != nil {
		return nil, err
	}
	kvs, err := w.view.Range(ctx, key, end, rev, limit, keysOnly)
	if err != nil {
		return nil, err
	}
	if rev == cur {
		for _, kv := range kvs {
			if _, inTail := w.newest(string(kv.Key), maxRev); !inTail {
				w.seen[string(kv.Key)] = true
			}
		}
	}
	return kvs, nil
}
