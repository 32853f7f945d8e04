package mysql

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/kite-db/kite/pkg/mvcc"
)

var (
	_ mvcc.WriteTx       = (*writeTx)(nil)
	_ mvcc.LeaseExpiryTx = (*writeTx)(nil)
)

// writeTx is a READ COMMITTED transaction that began by locking the
// revision row. Writes are kept in memory (pending) and sent with the next
// read, the next CompactBatch, or the COMMIT, each in one round trip.
type writeTx struct {
	reader
	b *Backend

	// current and compacted are the stored revisions: read with the lock,
	// then changed only by SetRevisions, so Revisions needs no query.
	current, compacted int64
	// beganCompacted is compacted as the lock read it; dirty says the
	// transaction wrote something, changed which state besides the log:
	// the wake-up the commit sends says so (wake.go).
	beganCompacted int64
	dirty          bool
	changed        mvcc.Changed

	pend pending
	// known holds live rows read by the prefetch, kept up to date by this
	// transaction's writes (nil: the key does not exist); see prefetch.go.
	known map[string]*mvccpb.KeyValue
	done  bool
	// mark is the newest log row written, checked after COMMIT on Galera
	// (galera.go).
	mark logMark
}

// BeginWrite implements mvcc.Backend. The first statement locks the
// revision row (SELECT ... FOR UPDATE): a writer elsewhere holds it until
// it commits, so writers run one at a time, revision order is commit
// order, and revisions have no gaps. Under READ COMMITTED each later read
// takes a fresh snapshot, so once the lock is granted this transaction
// sees every commit made before it; REPEATABLE READ would read from a
// snapshot that could predate the lock (and, with
// innodb_snapshot_isolation, fail on rows changed since). The isolation
// level, the start and the lock go in one round trip.
func (b *Backend) BeginWrite(ctx context.Context) (mvcc.WriteTx, error) {
	return b.beginWrite(ctx, nil)
}

// beginWrite begins a write transaction, prefetching keys (prefetch.go) in
// the same round trip.
func (b *Backend) beginWrite(ctx context.Context, keys [][]byte) (mvcc.WriteTx, error) {
	if err := b.historyLost(); err != nil {
		return nil, err
	}
	if err := b.lockWriter(ctx); err != nil {
		return nil, fmt.Errorf("begin write: %w", err)
	}
	conn, err := b.db.Conn(ctx)
	if err != nil {
		b.unlockWriter()
		return nil, classify(fmt.Errorf("begin write: connect: %w", err))
	}
	w := &writeTx{reader: reader{conn: conn, q: b.q, packet: b.packet, sticky: true}, b: b}
	w.reader.pending = &w.pend
	if keys != nil {
		err = w.lockAndPrefetch(ctx, keys)
	} else {
		var h History
		err = queryRowAfter(ctx, conn, b.beginWriteSQL(), nil, sqlLockRevisions, nil,
			append([]any{&w.current, &w.compacted}, h.scanTargets()...)...)
		if err == nil {
			h.Rev = w.current
			err = b.checkHistory(h)
		}
	}
	if err != nil {
		err = classify(errors.Join(fmt.Errorf("begin write: lock revisions: %w", err), endTx(conn)))
		b.unlockWriter()
		return nil, err
	}
	w.latest = w.current
	w.beganCompacted = w.compacted
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

// Limits past which the pending writes are sent without waiting for a
// read, so a huge transaction (a lease revoke of many keys) neither holds
// them all in memory nor builds one enormous batch.
const (
	flushRows  = 4096
	flushBytes = 4 << 20
)

func (w *writeTx) flushIfLarge(ctx context.Context) error {
	if w.pend.rows() < flushRows && w.pend.size < flushBytes {
		return nil
	}
	return w.flush(ctx)
}

// flush sends the pending writes.
func (w *writeTx) flush(ctx context.Context) error {
	if w.pend.empty() {
		return nil
	}
	batches := w.pend.batches(w.packet)
	w.pend.reset()
	for _, b := range batches {
		if _, err := w.conn.ExecContext(ctx, b.sql, b.args...); err != nil {
			return w.fail("send pending writes", err)
		}
	}
	return nil
}

// checkKey refuses a key the schema cannot hold (schema.go, maxKeyLen).
func checkKey(key []byte) error {
	if len(key) > maxKeyLen {
		return fmt.Errorf("%w: a key of %d bytes; kite on MySQL stores keys of up to %d bytes",
			mvcc.ErrRequestTooLarge, len(key), maxKeyLen)
	}
	return nil
}

func checkSub(sub int64) error {
	if sub < 0 || sub > math.MaxInt32 {
		return fmt.Errorf("%w: sub-revision %d out of range", mvcc.ErrTooManyChanges, sub)
	}
	return nil
}

// Put implements mvcc.WriteTx.
func (w *writeTx) Put(ctx context.Context, kv *mvccpb.KeyValue, sub int64) error {
	if err := w.writable(ctx, "put"); err != nil {
		return err
	}
	if err := errors.Join(checkSub(sub), checkKey(kv.Key)); err != nil {
		return w.fail("put", err)
	}
	key, value := nonNil(kv.Key), nonNil(kv.Value)
	w.noteLog(kv.ModRevision, int32(sub), key)
	w.pend.appendLog(logRow{rev: kv.ModRevision, sub: int32(sub), key: key, createRev: kv.CreateRevision,
		version: kv.Version, lease: kv.Lease, value: value})
	live := &mvccpb.KeyValue{Key: key, CreateRevision: kv.CreateRevision,
		ModRevision: kv.ModRevision, Version: kv.Version, Lease: kv.Lease, Value: value}
	w.pend.setLive(key, live)
	w.remember(key, live)
	w.latest = max(w.latest, kv.ModRevision)
	return w.flushIfLarge(ctx)
}

// Delete implements mvcc.WriteTx.
func (w *writeTx) Delete(ctx context.Context, key []byte, rev, sub int64) error {
	if err := w.writable(ctx, "delete"); err != nil {
		return err
	}
	if err := errors.Join(checkSub(sub), checkKey(key)); err != nil {
		return w.fail("delete", err)
	}
	key = nonNil(key)
	w.noteLog(rev, int32(sub), key)
	w.pend.appendLog(logRow{rev: rev, sub: int32(sub), key: key, deleted: true, value: []byte{}})
	w.pend.setLive(key, nil)
	w.remember(key, nil)
	w.latest = max(w.latest, rev)
	return w.flushIfLarge(ctx)
}

// Get implements mvcc.ReadTx. A key this transaction wrote and has not
// sent yet, or prefetched, is answered from memory; any other key's live
// row is not touched by the pending writes, so it is read without sending
// them. The applier calls Get before every put, so a batch of puts costs
// at most one round trip per put rather than two.
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

// Range implements mvcc.ReadTx, answering a latest read of one key this
// transaction knows (cached) from memory: the applier's compares.
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

// Lease implements mvcc.ReadTx, answering from memory for a lease this
// transaction changed and has not sent yet.
func (w *writeTx) Lease(ctx context.Context, id int64) (mvcc.Lease, bool, error) {
	if err := w.check(); err != nil {
		return mvcc.Lease{}, false, err
	}
	if l, ok := w.pend.leases[id]; ok {
		return mvcc.Lease{ID: id, TTL: l.ttl}, !l.deleted, nil
	}
	return w.lease(ctx, id, false)
}

// SetRevisions implements mvcc.WriteTx.
func (w *writeTx) SetRevisions(ctx context.Context, current, compacted int64) error {
	if err := w.writable(ctx, "set revisions"); err != nil {
		return err
	}
	w.pend.setRevisions(current, compacted, w.b.galera)
	w.current, w.compacted = current, compacted
	w.latest = max(w.latest, current)
	return nil
}

// PutLease implements mvcc.WriteTx.
func (w *writeTx) PutLease(ctx context.Context, l mvcc.Lease) error {
	if err := w.writable(ctx, "put lease"); err != nil {
		return err
	}
	w.pend.setLease(l.ID, l.TTL, false)
	w.changed |= mvcc.ChangedLeases
	return nil
}

// LeaseExpired implements mvcc.LeaseExpiryTx.
func (w *writeTx) LeaseExpired(ctx context.Context, id int64) (bool, error) {
	if l, ok := w.pend.leases[id]; ok && !l.deleted {
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
	w.pend.setLease(id, 0, true)
	w.changed |= mvcc.ChangedLeases
	return nil
}

// PutAuthState implements mvcc.WriteTx. The bytes are copied: they are
// sent later, with the next read or the COMMIT.
func (w *writeTx) PutAuthState(ctx context.Context, state []byte) error {
	if err := w.writable(ctx, "put auth state"); err != nil {
		return err
	}
	w.pend.statement(sqlPutAuthState, append([]byte{}, state...))
	w.changed |= mvcc.ChangedAuth
	return nil
}

// memberColumn stores a uint64 member ID in a signed BIGINT; Alarms turns
// it back.
func memberColumn(id uint64) int64 { return int64(id) }

// PutAlarm implements mvcc.WriteTx.
func (w *writeTx) PutAlarm(ctx context.Context, a *pb.AlarmMember) error {
	if err := w.writable(ctx, "put alarm"); err != nil {
		return err
	}
	w.pend.statement(sqlPutAlarm, memberColumn(a.MemberID), int32(a.Alarm))
	w.changed |= mvcc.ChangedAlarms
	return nil
}

// DeleteAlarm implements mvcc.WriteTx.
func (w *writeTx) DeleteAlarm(ctx context.Context, a *pb.AlarmMember) error {
	if err := w.writable(ctx, "delete alarm"); err != nil {
		return err
	}
	w.pend.statement(sqlDeleteAlarm, memberColumn(a.MemberID), int32(a.Alarm))
	w.changed |= mvcc.ChangedAlarms
	return nil
}

// compactDeleteRows bounds the primary keys one DELETE names.
const compactDeleteRows = 1000

// CompactBatch implements mvcc.WriteTx. The pending writes go with the
// query that finds the rows to remove; the rows are then deleted by
// primary key (queries.go says why in two steps).
//
// Rows are judged one by one, so the walk must cover every revision still
// in the log, from the oldest: a row kept by an earlier compaction because
// it was live then is superseded now.
func (w *writeTx) CompactBatch(ctx context.Context, compacted, fromRev, toRev int64) (int64, error) {
	if w.done {
		return 0, errors.New("compact: write transaction already ended")
	}
	rows, err := w.query(ctx, sqlCompactFind, fromRev, toRev, compacted, compacted)
	if err != nil {
		return 0, w.fail("compact: find rows", err)
	}
	var ids []any
	for rows.Next() {
		var rev int64
		var sub int32
		if err := rows.Scan(&rev, &sub); err != nil {
			rows.Close()
			return 0, w.fail("compact: find rows", err)
		}
		ids = append(ids, rev, sub)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return 0, w.fail("compact: find rows", err)
	}
	var removed int64
	for len(ids) > 0 {
		n := min(len(ids), 2*compactDeleteRows)
		q := sqlCompactDelete + "(" + strings.Repeat("(?, ?), ", n/2-1) + "(?, ?))"
		res, err := w.conn.ExecContext(ctx, q, ids[:n]...)
		if err != nil {
			return 0, w.fail("compact: delete rows", err)
		}
		affected, err := res.RowsAffected()
		if err != nil {
			return 0, w.fail("compact: delete rows", err)
		}
		removed += affected
		ids = ids[n:]
	}
	return removed, nil
}

// Commit implements mvcc.WriteTx: the pending writes and COMMIT go in one
// round trip (more only for writes larger than a statement may be). An
// error in any statement stops the server before the COMMIT, and the
// transaction is rolled back. COMMIT returns once InnoDB has flushed its
// redo log; then the other servers are woken (wake.go). MySQL has no
// notification that commits with the transaction, so a server that dies
// between the two leaves the others to learn of the commit when its
// wake-up connections drop.
func (w *writeTx) Commit() error {
	if w.done {
		return errors.New("commit: write transaction already ended")
	}
	if err := w.check(); err != nil {
		return errors.Join(fmt.Errorf("commit: %w", err), w.Rollback())
	}
	// Background: a COMMIT interrupted by a cancelled request would leave
	// the batch's fate unknown to every request in it.
	ctx := context.Background()
	batches := w.pend.batches(w.packet)
	w.pend.reset()
	last := statement{sql: "COMMIT"}
	if n := len(batches); n > 0 {
		last = batches[n-1]
		last.sql += "; COMMIT"
		batches = batches[:n-1]
	}
	for _, b := range batches {
		if _, err := w.conn.ExecContext(ctx, b.sql, b.args...); err != nil {
			return errors.Join(w.fail("commit: send pending writes", err), w.Rollback())
		}
	}
	if w.b.galera {
		last.sql = strings.TrimSuffix(last.sql, "COMMIT") + sqlGaleraCommit
	}
	start := time.Now()
	_, err := w.conn.ExecContext(ctx, last.sql, last.args...)
	if err == nil && w.b.galera {
		err = w.verifyCommitted(ctx)
	}
	if err != nil {
		return errors.Join(w.fail("commit", err), w.Rollback())
	}
	if observe := w.b.observeCommit.Load(); observe != nil {
		(*observe)(time.Since(start))
	}
	if w.dirty && w.b.wake != nil {
		changed := w.changed
		if w.compacted != w.beganCompacted {
			changed |= mvcc.ChangedCompacted
		}
		w.b.wake.committed(w.current, changed)
	}
	err = w.conn.Close()
	w.end()
	if err != nil {
		return fmt.Errorf("commit: release connection: %w", err)
	}
	return nil
}

// Rollback implements mvcc.WriteTx.
func (w *writeTx) Rollback() error {
	if w.done {
		return nil
	}
	defer w.end()
	if err := endTx(w.conn); err != nil && w.err == nil {
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
