package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/kite-db/kite/pkg/mvcc"
)

var (
	_ mvcc.WriteTx       = (*writeTx)(nil)
	_ mvcc.LeaseExpiryTx = (*writeTx)(nil)
)

// endTimeout bounds a ROLLBACK sent to end a transaction: past it the
// connection is dropped, which ends the transaction as well.
const endTimeout = 10 * time.Second

// writeTx is a READ COMMITTED transaction that began by locking the
// revision row. Writes are kept in memory (unsentWrites) and sent with the next
// read, the next CompactBatch, or the COMMIT, each in one round trip.
type writeTx struct {
	reader
	b  *Backend
	pc *pgxpool.Conn

	// current and compacted are the stored revisions: read with the lock,
	// then changed only by SetRevisions, so Revisions needs no query.
	current, compacted int64
	beganCompacted     int64

	unsent unsentWrites
	// known holds live rows read by Prefetch and kept up to date by this
	// transaction's writes (nil: the key does not exist); see prefetch.go.
	known map[string]*mvccpb.KeyValue
	// changed and dirty feed the commit notification.
	changed mvcc.Changed
	dirty   bool
	done    bool
}

// BeginWrite implements mvcc.Backend. The first statement locks the
// revision row: a writer in another kite server holds it until it commits,
// so writers of every server run one at a time, revision order is commit
// order, and revisions have no gaps. Under READ COMMITTED each later
// statement takes a new snapshot, so once the lock is granted this
// transaction sees every commit made before. BEGIN and the lock go in one
// round trip, with a bound on how long the transaction may sit idle: the
// Store never pauses inside one, so a write transaction idle for long
// belongs to a stalled or partitioned server, and Postgres ends it rather
// than let it stop every writer of the cluster.
func (b *Backend) BeginWrite(ctx context.Context) (mvcc.WriteTx, error) {
	return b.beginWrite(ctx, nil)
}

// beginWrite begins a write transaction, prefetching keys (prefetch.go) in
// the same round trip.
func (b *Backend) beginWrite(ctx context.Context, keys [][]byte) (mvcc.WriteTx, error) {
	if err := b.lockWriter(ctx); err != nil {
		return nil, fmt.Errorf("begin write: %w", err)
	}
	if err := b.historyLost(); err != nil {
		b.unlockWriter()
		return nil, err
	}
	pc, err := b.pool.Acquire(ctx)
	if err != nil {
		b.unlockWriter()
		return nil, classify(fmt.Errorf("begin write: acquire connection: %w", err))
	}
	w := &writeTx{reader: reader{conn: pc.Conn(), q: b.q, sticky: true}, b: b, pc: pc}
	w.reader.unsent = &w.unsent
	var h History
	batch := &pgx.Batch{}
	batch.Queue(sqlBeginWrite)
	batch.Queue(sqlWriteIdleTimeout)
	batch.Queue(sqlLockRevisions).QueryRow(func(row pgx.Row) error {
		return row.Scan(&w.current, &w.compacted, &h.Recorded, &h.Synced, &h.Current)
	})
	if len(keys) > 0 {
		w.queuePrefetch(batch, keys)
	}
	if err := pc.SendBatch(ctx, batch).Close(); err != nil {
		err = classify(errors.Join(fmt.Errorf("begin write: lock revisions: %w", err), endTx(pc)))
		b.unlockWriter()
		return nil, err
	}
	// Under the lock: no write can slip in between the check and this
	// transaction's own record of the timeline.
	h.Rev = w.current
	if err := b.checkRecorded(h); err != nil {
		err = errors.Join(err, endTx(pc))
		b.unlockWriter()
		return nil, err
	}
	w.latest, w.beganCompacted = w.current, w.compacted
	return w, nil
}

// Revisions implements mvcc.ReadTx.
func (w *writeTx) Revisions(context.Context) (current, compacted int64, err error) {
	if err := w.check(); err != nil {
		return 0, 0, err
	}
	return w.current, w.compacted, nil
}

// writable admits a write call. A cancelled ctx fails the transaction, as
// a failed statement would: the caller's batch is abandoned.
func (w *writeTx) writable(ctx context.Context, what string) error {
	if w.done {
		return fmt.Errorf("%s: write transaction already ended", what)
	}
	if err := w.check(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return w.fail(what, err)
	}
	w.dirty = true
	return nil
}

// flushIfLarge sends the pending rows once there are many, so a huge
// transaction (a lease revoke of many keys) neither holds them all in
// memory nor sends one enormous statement.
func (w *writeTx) flushIfLarge(ctx context.Context) error {
	if w.unsent.rows() < flushRows {
		return nil
	}
	b := &pgx.Batch{}
	w.unsent.queue(b)
	err := w.conn.SendBatch(ctx, b).Close()
	w.unsent.reset()
	if err != nil {
		return w.fail("send pending writes", err)
	}
	return nil
}

const flushRows = 4096

// Put implements mvcc.WriteTx.
func (w *writeTx) Put(ctx context.Context, kv *mvccpb.KeyValue, sub int64) error {
	if err := w.writable(ctx, "put"); err != nil {
		return err
	}
	if sub < 0 || sub > math.MaxInt32 {
		return w.fail("put", fmt.Errorf("%w: sub-revision %d out of range", mvcc.ErrTooManyChanges, sub))
	}
	key, value := nonNil(kv.Key), nonNil(kv.Value)
	w.unsent.appendLog(kv.ModRevision, int32(sub), key, kv.CreateRevision, kv.Version, kv.Lease, false, value)
	live := &mvccpb.KeyValue{Key: key, CreateRevision: kv.CreateRevision,
		ModRevision: kv.ModRevision, Version: kv.Version, Lease: kv.Lease, Value: value}
	w.unsent.setLive(key, live)
	w.remember(key, live)
	w.latest = max(w.latest, kv.ModRevision)
	return w.flushIfLarge(ctx)
}

// Delete implements mvcc.WriteTx.
func (w *writeTx) Delete(ctx context.Context, key []byte, rev, sub int64) error {
	if err := w.writable(ctx, "delete"); err != nil {
		return err
	}
	if sub < 0 || sub > math.MaxInt32 {
		return w.fail("delete", fmt.Errorf("%w: sub-revision %d out of range", mvcc.ErrTooManyChanges, sub))
	}
	key = nonNil(key)
	w.unsent.appendLog(rev, int32(sub), key, 0, 0, 0, true, []byte{})
	w.unsent.setLive(key, nil)
	w.remember(key, nil)
	w.latest = max(w.latest, rev)
	return w.flushIfLarge(ctx)
}

// Get implements mvcc.ReadTx. A key this transaction wrote is answered
// from memory; any other key's live row is not touched by the pending
// writes, so it is read without sending them first. The applier calls Get
// before every put, so this keeps a batch of puts at one round trip each
// rather than two.
func (w *writeTx) Get(ctx context.Context, key []byte) (*mvccpb.KeyValue, error) {
	if err := w.check(); err != nil {
		return nil, err
	}
	if kv, ok := w.cached(key); ok {
		if kv == nil {
			return nil, nil
		}
		return copyKV(kv, false), nil
	}
	return w.get(ctx, key, false)
}

// Lease implements mvcc.ReadTx, answering from memory for a lease this
// transaction changed, as Get does for keys.
func (w *writeTx) Lease(ctx context.Context, id int64) (mvcc.Lease, bool, error) {
	if err := w.check(); err != nil {
		return mvcc.Lease{}, false, err
	}
	if l, ok := w.unsent.leases[id]; ok {
		return mvcc.Lease{ID: id, TTL: l.ttl}, !l.deleted, nil
	}
	return w.lease(ctx, id, false)
}

// SetRevisions implements mvcc.WriteTx.
func (w *writeTx) SetRevisions(ctx context.Context, current, compacted int64) error {
	if err := w.writable(ctx, "set revisions"); err != nil {
		return err
	}
	w.unsent.setRevisions(current, compacted)
	w.current, w.compacted = current, compacted
	w.latest = max(w.latest, current)
	return nil
}

// PutLease implements mvcc.WriteTx.
func (w *writeTx) PutLease(ctx context.Context, l mvcc.Lease) error {
	if err := w.writable(ctx, "put lease"); err != nil {
		return err
	}
	w.unsent.setLease(l.ID, l.TTL, false, sqlPutLease, l.ID, l.TTL)
	w.changed |= mvcc.ChangedLeases
	return nil
}

// LeaseExpired implements mvcc.LeaseExpiryTx.
func (w *writeTx) LeaseExpired(ctx context.Context, id int64) (bool, error) {
	if c, ok := w.unsent.leases[id]; ok && !c.deleted {
		// Granted in this transaction: its clock has only just started.
		return false, nil
	}
	var expired bool
	found, err := w.queryRow(ctx, true, sqlLeaseExpired, []any{&expired}, id)
	if err != nil {
		return false, w.fail("check lease expiry", err)
	}
	return found && expired, nil
}

// DeleteLease implements mvcc.WriteTx.
func (w *writeTx) DeleteLease(ctx context.Context, id int64) error {
	if err := w.writable(ctx, "delete lease"); err != nil {
		return err
	}
	w.unsent.setLease(id, 0, true, sqlDeleteLease, id)
	w.changed |= mvcc.ChangedLeases
	return nil
}

// PutAuthState implements mvcc.WriteTx. The commit's notification says
// the state changed (ChangedAuth), so the other servers re-read it. The
// bytes are copied: they are sent later, with the next read or the COMMIT.
func (w *writeTx) PutAuthState(ctx context.Context, state []byte) error {
	if err := w.writable(ctx, "put auth state"); err != nil {
		return err
	}
	w.unsent.statement(sqlPutAuthState, append([]byte{}, state...))
	w.changed |= mvcc.ChangedAuth
	return nil
}

// memberColumn stores a uint64 member ID in a signed bigint; Alarms turns
// it back.
func memberColumn(id uint64) int64 { return int64(id) }

// PutAlarm implements mvcc.WriteTx.
func (w *writeTx) PutAlarm(ctx context.Context, a *pb.AlarmMember) error {
	if err := w.writable(ctx, "put alarm"); err != nil {
		return err
	}
	w.unsent.statement(sqlPutAlarm, memberColumn(a.MemberID), int32(a.Alarm))
	w.changed |= mvcc.ChangedAlarms
	return nil
}

// DeleteAlarm implements mvcc.WriteTx.
func (w *writeTx) DeleteAlarm(ctx context.Context, a *pb.AlarmMember) error {
	if err := w.writable(ctx, "delete alarm"); err != nil {
		return err
	}
	w.unsent.statement(sqlDeleteAlarm, memberColumn(a.MemberID), int32(a.Alarm))
	w.changed |= mvcc.ChangedAlarms
	return nil
}

// CompactBatch implements mvcc.WriteTx, sending the pending writes with it.
//
// Rows are judged one by one, so the walk must cover every revision still in
// the log, from the oldest: a row kept by an earlier compaction because it
// was live then is superseded now.
func (w *writeTx) CompactBatch(ctx context.Context, compacted, fromRev, toRev int64) (int64, error) {
	if w.done {
		return 0, errors.New("compact: write transaction already ended")
	}
	if err := w.check(); err != nil {
		return 0, err
	}
	b := &pgx.Batch{}
	w.unsent.queue(b)
	var tag pgconn.CommandTag
	b.Queue(sqlCompact, fromRev, toRev, compacted).Exec(func(ct pgconn.CommandTag) error {
		tag = ct
		return nil
	})
	err := w.conn.SendBatch(ctx, b).Close()
	w.unsent.reset()
	if err != nil {
		return 0, w.fail("compact", err)
	}
	return tag.RowsAffected(), nil
}

// Commit implements mvcc.WriteTx: the pending writes, the notification and
// COMMIT go in one round trip. An error in any of them makes Postgres skip
// the rest of the pipeline, COMMIT included, and the transaction is rolled
// back. The notification is delivered by Postgres only when, and if, the
// transaction commits, in commit order: it tells the other servers there
// is something to read, never what (see notify.go).
func (w *writeTx) Commit() error {
	if w.done {
		return errors.New("commit: write transaction already ended")
	}
	if err := w.check(); err != nil {
		return errors.Join(fmt.Errorf("commit: %w", err), w.Rollback())
	}
	if w.dirty && !w.unsent.revisions {
		// Every write records its timeline, a batch that moved no
		// revision (a lease grant) too.
		w.unsent.setRevisions(w.current, w.compacted)
	}
	b := &pgx.Batch{}
	w.unsent.queue(b)
	if w.dirty {
		changed := w.changed
		if w.compacted != w.beganCompacted {
			changed |= mvcc.ChangedCompacted
		}
		b.Queue(sqlNotify, notifyChannel, commitPayload(w.b.origin, w.current, changed))
	}
	var tag pgconn.CommandTag
	b.Queue("COMMIT").Exec(func(ct pgconn.CommandTag) error {
		tag = ct
		return nil
	})
	// Background: a COMMIT interrupted by a cancelled request would leave
	// the batch's fate unknown to every request in it.
	start := time.Now()
	err := w.conn.SendBatch(context.Background(), b).Close()
	if observe := w.b.observeCommit.Load(); observe != nil && err == nil {
		(*observe)(time.Since(start))
	}
	w.unsent.reset()
	if err == nil && tag.String() != "COMMIT" {
		err = fmt.Errorf("server answered %q", tag.String())
	}
	if err != nil {
		return errors.Join(w.fail("commit", err), w.Rollback())
	}
	w.pc.Release()
	w.end()
	return nil
}

// Rollback implements mvcc.WriteTx.
func (w *writeTx) Rollback() error {
	if w.done {
		return nil
	}
	defer w.end()
	if err := endTx(w.pc); err != nil && w.err == nil {
		// After a failed statement the connection may be gone, which ends
		// the transaction too: only a clean transaction reports this.
		return fmt.Errorf("rollback: %w", err)
	}
	return nil
}

func (w *writeTx) end() {
	w.done = true
	w.b.unlockWriter()
}
