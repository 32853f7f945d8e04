package sqlite

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/kite-db/kite/pkg/mvcc"
)

var _ mvcc.WriteTx = (*writeTx)(nil)

// writeTx runs on the pinned writer connection while holding the write
// mutex. BEGIN, COMMIT and ROLLBACK are plain statements on that connection
// rather than a database/sql Tx, because a Tx would re-prepare every
// statement of the connection for each transaction.
type writeTx struct {
	reader
	b    *Backend
	done bool
	// current and compacted are the stored revisions: read at BEGIN, then
	// changed only by SetRevisions, so Revisions needs no query.
	current, compacted int64
	// added are the rows this transaction put into the key index, taken
	// out again if it does not commit; removed are the rows its
	// compaction steps deleted, taken out of the index once it commits.
	added, removed []keyID
	// maxRemoved is the largest id removed; rewrote says the transaction
	// writes the log again below it (see rewrite).
	maxRemoved int64
	rewrote    bool
	// leaseUndo is how Backend.leased was before each change this
	// transaction made to it, put back if it does not commit.
	leaseUndo []leaseChange
}

// leaseChange is a key's entry in Backend.leased before a change: its
// lease, had false for none.
type leaseChange struct {
	key   string
	lease int64
	had   bool
}

// rewrite is called before the transaction writes a row or a revision
// at or below a row it removed: it writes history again (only kite copy
// --force does, emptying a target and filling it from revision 1). The
// deferred removal would then leave the removed rows' ids, which the new
// rows reuse, in the index; so they go at once. A read begun before on
// this Backend then loses the compacted rows its snapshot still holds,
// which no server meets: none serves a copy's target while it is filled.
// Should the transaction not commit, Rollback rebuilds the index.
func (w *writeTx) rewrite() {
	if len(w.removed) > 0 {
		w.b.idx.remove(w.removed)
		w.removed, w.rewrote = nil, true
	}
}

// Revisions implements mvcc.ReadTx.
func (w *writeTx) Revisions(context.Context) (current, compacted int64, err error) {
	if err := w.check(); err != nil {
		return 0, 0, err
	}
	return w.current, w.compacted, nil
}

func (w *writeTx) exec(ctx context.Context, what string, id stmtID, args ...any) (int64, error) {
	if err := w.check(); err != nil {
		return 0, err
	}
	if w.done {
		return 0, fmt.Errorf("%s: write transaction already ended", what)
	}
	sctx, err := w.stmtCtx(ctx, true)
	if err != nil {
		return 0, w.fail(what, err)
	}
	res, err := w.stmts[id].ExecContext(sctx, args...)
	if err != nil {
		return 0, w.fail(what, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, w.fail(what, err)
	}
	return n, nil
}

// raise records that rows at rev exist, so reads at rev are still latest
// reads and reads below it use the log.
func (w *writeTx) raise(rev int64) {
	w.latest = max(w.latest, rev)
}

// Put implements mvcc.WriteTx.
func (w *writeTx) Put(ctx context.Context, kv *mvccpb.KeyValue, sub int64) error {
	key, value := nonNil(kv.Key), nonNil(kv.Value)
	id, err := w.b.changeID(kv.ModRevision, sub)
	if err != nil {
		return w.fail("put", err)
	}
	if err := w.b.writeFault.take(); err != nil {
		return w.fail("put: append row", err)
	}
	if _, err := w.exec(ctx, "put: append row", qInsertPut, id, key,
		kv.CreateRevision, kv.Version, kv.Lease, value); err != nil {
		return err
	}
	if id <= w.maxRemoved {
		w.rewrite()
	}
	if err := w.setLease(ctx, key, w.index(key, id, false), kv.Lease); err != nil {
		return err
	}
	w.raise(kv.ModRevision)
	return nil
}

// Delete implements mvcc.WriteTx.
func (w *writeTx) Delete(ctx context.Context, key []byte, rev, sub int64) error {
	key = nonNil(key)
	id, err := w.b.changeID(rev, sub)
	if err != nil {
		return w.fail("delete", err)
	}
	if err := w.b.writeFault.take(); err != nil {
		return w.fail("delete: append tombstone", err)
	}
	if _, err := w.exec(ctx, "delete: append tombstone", qInsertTombstone, id, key); err != nil {
		return err
	}
	if id <= w.maxRemoved {
		w.rewrite()
	}
	if err := w.setLease(ctx, key, w.index(key, id, true), 0); err != nil {
		return err
	}
	w.raise(rev)
	return nil
}

// index adds a row just appended to the key index. Reads see it only from
// a snapshot that holds it (keyindex.go); Rollback takes it out again. It
// returns the key as the index holds it.
func (w *writeTx) index(key []byte, id int64, deleted bool) string {
	if deleted {
		id = -id
	}
	k := keyID{key: string(key), id: id} // one string for the tree and the list
	w.b.idx.add(k.key, k.id)
	w.added = append(w.added, k)
	return k.key
}

// setLease makes the table leased hold key under lease (0: not at all),
// the lease of the key's row just appended; k is key as a string (the key
// index's), key itself is bound, as a BLOB. Most puts change nothing
// there: a key without a lease that had none.
func (w *writeTx) setLease(ctx context.Context, key []byte, k string, lease int64) error {
	old, had := w.b.leased[k]
	if old == lease {
		return nil
	}
	w.leaseUndo = append(w.leaseUndo, leaseChange{key: k, lease: old, had: had})
	if had {
		if _, err := w.exec(ctx, "update lease keys", qDeleteLeased, old, key); err != nil {
			return err
		}
		delete(w.b.leased, k)
	}
	if lease != 0 {
		if _, err := w.exec(ctx, "update lease keys", qPutLeased, lease, key); err != nil {
			return err
		}
		w.b.leased[k] = lease
	}
	return nil
}

// changeID is the row id of change sub of revision rev, or the error that
// refuses such a change (mvcc.ErrTooManyChanges beyond the bound).
func (b *Backend) changeID(rev, sub int64) (int64, error) {
	id, err := rowID(rev, sub)
	if err == nil {
		err = checkChanges(rev, sub, b.opts.MaxChangesPerRevision)
	}
	return id, err
}

// CheckChange returns the error Put or Delete would fail with for change
// sub of revision rev, for a caller that writes the change later
// (memtail) and must refuse it now.
func (b *Backend) CheckChange(rev, sub int64) error {
	_, err := b.changeID(rev, sub)
	return err
}

// SetRevisions implements mvcc.WriteTx.
func (w *writeTx) SetRevisions(ctx context.Context, current, compacted int64) error {
	if _, err := w.exec(ctx, "set revisions", qSetRevisions, current, compacted); err != nil {
		return err
	}
	if lastID(current) < w.maxRemoved {
		w.rewrite()
	}
	w.current, w.compacted = current, compacted
	w.raise(current)
	return nil
}

// SetAppliedIndex implements mvcc.AppliedIndexTx: the raft entry the
// transaction applies is recorded with its rows (raftsql mode).
func (w *writeTx) SetAppliedIndex(ctx context.Context, index uint64) error {
	_, err := w.exec(ctx, "set applied index", qSetAppliedIndex, int64(index))
	return err
}

// PutLease implements mvcc.WriteTx.
func (w *writeTx) PutLease(ctx context.Context, l mvcc.Lease) error {
	_, err := w.exec(ctx, "put lease", qPutLease, l.ID, l.TTL)
	return err
}

// DeleteLease implements mvcc.WriteTx.
func (w *writeTx) DeleteLease(ctx context.Context, id int64) error {
	_, err := w.exec(ctx, "delete lease", qDeleteLease, id)
	return err
}

// PutAuthState implements mvcc.WriteTx. The state is meta's 'auth' row, a
// BLOB (see metaTable).
func (w *writeTx) PutAuthState(ctx context.Context, state []byte) error {
	_, err := w.exec(ctx, "put auth state", qPutAuthState, nonNil(state))
	return err
}

// memberColumn stores a uint64 member ID in SQLite's signed 64-bit integer
// (database/sql refuses uint64 values with the high bit set); Alarms turns
// it back.
func memberColumn(id uint64) int64 { return int64(id) }

// PutAlarm implements mvcc.WriteTx.
func (w *writeTx) PutAlarm(ctx context.Context, a *pb.AlarmMember) error {
	_, err := w.exec(ctx, "put alarm", qPutAlarm, memberColumn(a.MemberID), int32(a.Alarm))
	return err
}

// DeleteAlarm implements mvcc.WriteTx.
func (w *writeTx) DeleteAlarm(ctx context.Context, a *pb.AlarmMember) error {
	_, err := w.exec(ctx, "delete alarm", qDeleteAlarm, memberColumn(a.MemberID), int32(a.Alarm))
	return err
}

// CompactBatch implements mvcc.WriteTx.
//
// Rows are judged one by one, so the walk must cover every revision still in
// the log, from the oldest: a row kept by an earlier compaction because it
// was live then is superseded now. A row goes when it is a tombstone or
// the key index knows a newer row of its key at or below compacted.
func (w *writeTx) CompactBatch(ctx context.Context, compacted, fromRev, toRev int64) (int64, error) {
	rows, err := w.query(ctx, true, qCompactCandidates, firstID(fromRev), lastID(toRev), lastID(compacted))
	if err != nil {
		return 0, w.fail("compact: read rows", err)
	}
	maxID := lastID(compacted)
	var gone []keyID
	for rows.Next() {
		var (
			id      int64
			key     []byte
			deleted bool
		)
		if err := rows.Scan(&id, blob{&key}, &deleted); err != nil {
			rows.Close()
			return 0, w.fail("compact: read rows", err)
		}
		if deleted || w.idx.superseded(key, id, maxID) {
			if deleted {
				id = -id
			}
			w.maxRemoved = max(w.maxRemoved, abs(id))
			gone = append(gone, keyID{key: string(key), id: id})
		}
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return 0, w.fail("compact: read rows", err)
	}
	var n int64
	for page := range slices.Chunk(gone, idPage) {
		ids := make([]int64, len(page))
		for i, k := range page {
			ids[i] = abs(k.id)
		}
		m, err := w.exec(ctx, "compact: delete rows", qDeleteRows, idList(ids))
		if err != nil {
			return n, err
		}
		n += m
	}
	w.removed = append(w.removed, gone...)
	return n, nil
}

// Commit implements mvcc.WriteTx. On failure it rolls back, so the
// connection is clean for the next transaction and nothing of this one
// remains.
func (w *writeTx) Commit() error {
	if w.done {
		return errors.New("commit: write transaction already ended")
	}
	if err := w.check(); err != nil {
		return errors.Join(fmt.Errorf("commit: %w", err), w.Rollback())
	}
	// Background: a COMMIT interrupted by a cancelled request would leave
	// the batch's fate unknown to every request in it.
	start := time.Now()
	if _, err := w.stmts[qCommit].ExecContext(context.Background()); err != nil {
		return errors.Join(w.fail("commit", err), w.Rollback())
	}
	if observe := w.b.observeCommit.Load(); observe != nil {
		(*observe)(time.Since(start))
	}
	w.added, w.leaseUndo = nil, nil
	w.b.committed.Store(w.current)
	w.b.idx.queuePrune(w.removed)
	w.end()
	w.b.ckpt.kick()
	return nil
}

// Rollback implements mvcc.WriteTx.
func (w *writeTx) Rollback() error {
	if w.done {
		return nil
	}
	defer w.end()
	_, err := w.stmts[qRollback].ExecContext(context.Background())
	for _, c := range slices.Backward(w.leaseUndo) {
		if c.had {
			w.b.leased[c.key] = c.lease
		} else {
			delete(w.b.leased, c.key)
		}
	}
	if w.rewrote {
		// The removals already left the index (rewrite): read it again
		// from the log as it is after the rollback.
		x, lerr := loadKeyIndex(context.Background(), w.b.wconn)
		if lerr != nil {
			return errors.Join(fmt.Errorf("rollback: %w", lerr), err)
		}
		w.b.idx.replace(x)
		w.added = nil
	}
	if err != nil {
		// After a failed statement or COMMIT, SQLite may already have rolled
		// back, and then ROLLBACK fails with "no transaction is active": the outcome
		// the caller wants.
		if w.err != nil {
			return nil
		}
		return fmt.Errorf("rollback: %w", err)
	}
	return nil
}

func (w *writeTx) end() {
	w.done = true
	// Before the next writer may append rows with the same ids.
	w.b.idx.remove(w.added)
	w.b.unlockWriter()
}
