package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strconv"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/kite-db/kite/pkg/mvcc"
)

// reader holds the reads shared by read and write transactions; only the
// connection their statements run on differs.
type reader struct {
	stmts []*sql.Stmt // prepared on the transaction's connection
	idx   *keyIndex

	// latest is the newest revision the transaction sees rows of: a read
	// transaction's snapshot, raised by a write transaction as it appends
	// rows. A read at or above it sees every row of the key index up to
	// it, none beyond (maxID).
	latest int64

	// sticky makes the first error final (write transactions): SQLite may
	// have rolled the transaction back on that error, and a later statement
	// would then run, and commit, on its own.
	sticky bool
	err    error
}

var _ mvcc.ReadTx = (*readTx)(nil)

type readTx struct {
	reader
	rc                 *readConn
	b                  *Backend
	current, compacted int64  // read once at BeginRead
	applied            uint64 // likewise: the snapshot's applied index
	gen                uint64 // the key index's generation at BeginRead
	done               bool
}

func (r *reader) stmt(_ context.Context, id stmtID) *sql.Stmt { return r.stmts[id] }

// Revisions implements mvcc.ReadTx: the snapshot's revisions, read when it
// was taken.
func (t *readTx) Revisions(context.Context) (current, compacted int64, err error) {
	return t.current, t.compacted, nil
}

// AppliedIndex implements mvcc.AppliedReadTx: the index SetAppliedIndex
// last recorded (0 if none) as of the snapshot, read when it was taken, so
// that a caller keeping the entries after it elsewhere (a raft log,
// memtail's tail) knows which of them this state already holds.
func (t *readTx) AppliedIndex(context.Context) (uint64, error) { return t.applied, nil }

// fail wraps err with what was being done and, in a write transaction,
// poisons it.
func (r *reader) fail(what string, err error) error {
	err = fmt.Errorf("%s: %w", what, classify(err))
	if r.sticky && r.err == nil {
		r.err = err
	}
	return err
}

func (r *reader) check() error {
	if r.err != nil {
		return fmt.Errorf("transaction failed earlier: %w", r.err)
	}
	return nil
}

func (r *reader) query(ctx context.Context, short bool, id stmtID, args ...any) (*sql.Rows, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	sctx, err := r.stmtCtx(ctx, short)
	if err != nil {
		return nil, err
	}
	return r.stmt(ctx, id).QueryContext(sctx, args...)
}

func (r *reader) queryRow(ctx context.Context, short bool, id stmtID, dest []any, args ...any) error {
	if err := r.check(); err != nil {
		return err
	}
	sctx, err := r.stmtCtx(ctx, short)
	if err != nil {
		return err
	}
	return r.stmt(ctx, id).QueryRowContext(sctx, args...).Scan(dest...)
}

// stmtCtx is the context a statement runs with. database/sql and modernc
// each start a goroutine per statement to watch a cancellable context (about
// 4% of the writer's time under put load, 6-8% of a get's). So a statement
// that is short by construction (one key, the revisions, a bounded page)
// runs without one, once ctx is checked; a read that may walk a large range
// keeps ctx, so a client that goes away stops it. In the write transaction
// every statement runs without one: each is short (CompactBatch is bounded
// by its revisions), and an interrupted statement would poison the batch.
func (r *reader) stmtCtx(ctx context.Context, short bool) (context.Context, error) {
	if !r.sticky && !short {
		return ctx, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return context.WithoutCancel(ctx), nil
}

// shortRows is the most rows a statement may return and still count as
// short for stmtCtx: a page of kube-apiserver's lists (500) and more.
const shortRows = 4096

func isShort(limit int64) bool { return limit > 0 && limit <= shortRows }

// Revisions implements mvcc.ReadTx.
func (r *reader) Revisions(ctx context.Context) (current, compacted int64, err error) {
	if err := r.queryRow(ctx, true, qRevisions, []any{&current, &compacted}); err != nil {
		return 0, 0, r.fail("read revisions", err)
	}
	return current, compacted, nil
}

// span turns etcd's range end into the key index's bounds: a single key
// becomes [key, key+"\x00"), the only key between the two in bytewise
// order; "\x00" has no upper bound.
func span(key, end []byte) (from, to []byte, open bool) {
	switch {
	case len(end) == 0:
		return key, append(append(make([]byte, 0, len(key)+1), key...), 0), false
	case len(end) == 1 && end[0] == 0:
		return key, nil, true
	default:
		return key, end, false
	}
}

// maxID is the largest id a read at rev may see: the last of rev, or of
// the newest revision with rows for a read at or above it (a read
// transaction's snapshot; a write transaction's own rows included).
func (r *reader) maxID(rev int64) int64 { return lastID(min(rev, r.latest)) }

// Range implements mvcc.ReadTx: the key index names the row of each key
// at rev, and the rows are read by id.
func (r *reader) Range(ctx context.Context, key, end []byte, rev, limit int64, keysOnly bool) ([]*mvccpb.KeyValue, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	from, to, open := span(key, end)
	var ids []int64
	if limit > 0 {
		ids = make([]int64, 0, min(limit, 1024))
	}
	r.idx.scan(from, to, open, r.maxID(rev), func(_ string, id int64) bool {
		ids = append(ids, id)
		return limit <= 0 || int64(len(ids)) < limit
	})
	kvs, err := r.rowsByID(ctx, ids, !keysOnly)
	if err != nil {
		return nil, r.fail("range", err)
	}
	return kvs, nil
}

// idPage is how many ids one statement of rowsByID or CompactBatch names.
const idPage = 512

// idList is ids as the JSON array json_each reads.
func idList(ids []int64) string {
	b := make([]byte, 0, len(ids)*17+2)
	b = append(b, '[')
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, id, 10)
	}
	return string(append(b, ']'))
}

// rowsByID reads the rows with the given ids, in that order. Every id must
// name a row of the snapshot: the key index gave it, for a revision the
// snapshot holds.
func (r *reader) rowsByID(ctx context.Context, ids []int64, values bool) ([]*mvccpb.KeyValue, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	chunk := make([]mvccpb.KeyValue, len(ids))
	kvs := make([]*mvccpb.KeyValue, len(ids))
	id := qRowsByIDKeysOnly
	if values {
		id = qRowsByID
	}
	var at map[int64]int // built only should the rows come out of order
	for start := 0; start < len(ids); start += idPage {
		page := ids[start:min(start+idPage, len(ids))]
		rows, err := r.query(ctx, true, id, idList(page))
		if err != nil {
			return nil, err
		}
		var (
			rowID, create, version, lease int64
			key, value                    []byte
		)
		dest := []any{&rowID, blob{&key}, i64{&create}, i64{&version}, i64{&lease}}
		if values {
			dest = append(dest, blob{&value})
		}
		n := 0
		for rows.Next() {
			if err := rows.Scan(dest...); err != nil {
				rows.Close()
				return nil, fmt.Errorf("scan: %w", err)
			}
			// json_each, the outer loop of the CROSS JOIN, walks the array
			// in order, so the rows come in the order asked (a map of every
			// id was 2-3% of a list's CPU).
			i := start + n
			if n >= len(page) || page[n] != rowID {
				if at == nil {
					at = make(map[int64]int, len(ids))
					for j, rid := range ids {
						at[rid] = j
					}
				}
				var ok bool
				if i, ok = at[rowID]; !ok || i < start || i >= start+len(page) || kvs[i] != nil {
					rows.Close()
					return nil, fmt.Errorf("row %d read but not asked for", rowID)
				}
			}
			kv := &chunk[i]
			kv.Key, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease, kv.Value =
				key, create, revOf(rowID), version, lease, value
			kvs[i] = kv
			n++
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return nil, err
		}
		if n != len(page) {
			return nil, fmt.Errorf("the key index names %d rows, the log holds %d of them", len(page), n)
		}
	}
	return kvs, nil
}

// Count implements mvcc.ReadTx, from the key index alone.
func (r *reader) Count(ctx context.Context, key, end []byte, rev int64) (int64, error) {
	if err := r.check(); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	from, to, open := span(key, end)
	var n int64
	r.idx.scan(from, to, open, r.maxID(rev), func(string, int64) bool { n++; return true })
	return n, nil
}

// Get implements mvcc.ReadTx.
func (r *reader) Get(ctx context.Context, key []byte) (*mvccpb.KeyValue, error) {
	return r.get(ctx, key, true)
}

var _ mvcc.RowMetaReader = (*reader)(nil) // and so writeTx, which embeds it

// GetMeta implements mvcc.RowMetaReader: Get without reading the value.
func (r *reader) GetMeta(ctx context.Context, key []byte) (*mvccpb.KeyValue, error) {
	return r.get(ctx, key, false)
}

func (r *reader) get(ctx context.Context, key []byte, whole bool) (*mvccpb.KeyValue, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	id := r.idx.newest(key, lastID(r.latest))
	if id <= 0 {
		return nil, nil
	}
	kv := &mvccpb.KeyValue{ModRevision: revOf(id)}
	stmt, cols := qRowMetaByID, []any{blob{&kv.Key}, i64{&kv.CreateRevision}, i64{&kv.Version}, i64{&kv.Lease}}
	if whole {
		stmt, cols = qRowByID, append(cols, blob{&kv.Value})
	}
	err := r.queryRow(ctx, true, stmt, cols, id)
	if errors.Is(err, sql.ErrNoRows) {
		err = fmt.Errorf("the key index names row %d of key %q, the log does not hold it", id, key)
	}
	if err != nil {
		return nil, r.fail("get", err)
	}
	return kv, nil
}

// GetLatest implements mvcc.Backend with one statement on a pooled read
// connection and no transaction around it: SQLite runs a lone statement on
// a snapshot of its own, so the row and the revisions agree. The key index
// names the row before that snapshot is taken, from the newest revision
// committed then; the answer stands when the index, asked again at the
// snapshot's revision, names the same row. A commit in between (rare:
// the two are microseconds apart) is met by asking again, and a key
// written faster than that by a read transaction, whose snapshot is
// pinned before the index is asked.
func (b *Backend) GetLatest(ctx context.Context, key []byte) (*mvccpb.KeyValue, int64, int64, error) {
	if b.closed.Load() {
		return nil, 0, 0, mvcc.ErrClosed
	}
	key = nonNil(key)
	kv, current, compacted, ok, err := b.getLatest(ctx, key)
	if err != nil || ok {
		return kv, current, compacted, err
	}
	tx, err := b.beginRead(ctx)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("get latest: %w", err)
	}
	defer tx.Rollback()
	if kv, err = tx.Get(ctx, key); err != nil {
		return nil, 0, 0, fmt.Errorf("get latest: %w", err)
	}
	return kv, tx.current, tx.compacted, nil
}

// getLatestTries is how often getLatest asks before GetLatest takes a
// read transaction.
const getLatestTries = 3

// getLatest is GetLatest's lone statement; ok is false when the key index
// named another row each time.
func (b *Backend) getLatest(ctx context.Context, key []byte) (kv *mvccpb.KeyValue, current, compacted int64, ok bool, err error) {
	rc, err := b.readers.get(ctx)
	if err != nil {
		return nil, 0, 0, false, fmt.Errorf("get latest: wait for connection: %w", err)
	}
	defer b.readers.put(rc)
	// One key: short, see stmtCtx.
	if err := ctx.Err(); err != nil {
		return nil, 0, 0, false, fmt.Errorf("get latest: %w", err)
	}
	// Registered as a read is: a row the snapshot holds stays in the index
	// while it is asked.
	gen := b.idx.beginRead()
	defer b.idx.endRead(gen)
	id := b.idx.newest(key, lastID(b.committed.Load()))
	for range getLatestTries {
		kv = nil
		// The commonest request runs on the driver connection itself:
		// through database/sql (the statement lookup, argument conversion,
		// Rows and Scan) it cost about a fifth of a get's CPU.
		err = rc.conn.Raw(func(any) error {
			rows, err := rc.getLatest.QueryContext(context.Background(),
				[]driver.NamedValue{{Ordinal: 1, Value: max(id, 0)}})
			if err != nil {
				return err
			}
			var row [7]driver.Value
			err = rows.Next(row[:])
			if cerr := rows.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err // io.EOF included: the statement always returns one row
			}
			current, compacted = asInt(row[0]), asInt(row[1])
			if row[2] != nil {
				kv = &mvccpb.KeyValue{Key: asBytes(row[2]), CreateRevision: asInt(row[3]),
					ModRevision: revOf(id), Version: asInt(row[4]), Lease: asInt(row[5]), Value: asBytes(row[6])}
			}
			return nil
		})
		if err != nil {
			return nil, 0, 0, false, fmt.Errorf("get latest: %w", err)
		}
		want := b.idx.newest(key, lastID(current))
		switch {
		case want <= 0 && id <= 0: // no live row at the snapshot: no key
			return nil, current, compacted, true, nil
		case want != id:
			id = want
		case kv == nil || !bytes.Equal(kv.Key, key):
			return nil, 0, 0, false, fmt.Errorf("get latest: the key index names row %d of key %q, the log does not hold it", id, key)
		default:
			return kv, current, compacted, true, nil
		}
	}
	return nil, 0, 0, false, nil
}

// asInt and asBytes read the values a modernc driver row holds for INTEGER
// and BLOB columns: int64, and a []byte already copied out of SQLite.
func asInt(v driver.Value) int64 {
	n, _ := v.(int64)
	return n
}

func asBytes(v driver.Value) []byte {
	switch b := v.(type) {
	case []byte:
		return b
	case string:
		return []byte(b)
	}
	return nil
}

// Changes implements mvcc.ReadTx. The previous row of each change is the
// key index's row before it, read by id; a previous tombstone counts as no
// previous row, as a key that did not exist has no prev_kv in etcd.
func (r *reader) Changes(ctx context.Context, fromRev, toRev int64, limit int, withPrev bool) ([]mvcc.Change, error) {
	lim := int64(limit)
	if lim <= 0 {
		lim = -1
	}
	rows, err := r.query(ctx, isShort(lim), qChanges, firstID(fromRev), lastID(toRev), lim)
	if err != nil {
		return nil, r.fail("read changes", err)
	}
	defer rows.Close()
	var (
		out     []mvcc.Change
		prevIDs []int64 // of the changes that have a previous row
		prevOf  []int   // the change each of prevIDs belongs to
	)
	for rows.Next() {
		var (
			c       mvcc.Change
			rowID   int64
			deleted bool
			kv      = &mvccpb.KeyValue{}
		)
		if err := rows.Scan(&rowID, &kv.Key, &kv.CreateRevision, &kv.Version,
			&kv.Lease, &deleted, &kv.Value); err != nil {
			return nil, r.fail("read changes: scan", err)
		}
		kv.ModRevision, c.Sub = revOf(rowID), subOf(rowID)
		if deleted {
			kv = &mvccpb.KeyValue{Key: kv.Key, ModRevision: kv.ModRevision}
		}
		c.Deleted, c.KV = deleted, kv
		if withPrev {
			if p := r.idx.prev(kv.Key, rowID); p != 0 {
				prevIDs, prevOf = append(prevIDs, p), append(prevOf, len(out))
			}
		}
		out = append(out, c)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, r.fail("read changes", err)
	}
	prevs, err := r.rowsByID(ctx, prevIDs, true)
	if err != nil {
		return nil, r.fail("read changes: previous rows", err)
	}
	for i, p := range prevs {
		out[prevOf[i]].PrevKV = p
	}
	return out, nil
}

// Leases implements mvcc.ReadTx.
func (r *reader) Leases(ctx context.Context) ([]mvcc.Lease, error) {
	rows, err := r.query(ctx, false, qLeases)
	if err != nil {
		return nil, r.fail("read leases", err)
	}
	defer rows.Close()
	var out []mvcc.Lease
	for rows.Next() {
		var l mvcc.Lease
		if err := rows.Scan(&l.ID, &l.TTL); err != nil {
			return nil, r.fail("read leases: scan", err)
		}
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, r.fail("read leases", err)
	}
	return out, nil
}

// Lease implements mvcc.ReadTx.
func (r *reader) Lease(ctx context.Context, id int64) (mvcc.Lease, bool, error) {
	var ttl int64
	err := r.queryRow(ctx, true, qLease, []any{&ttl}, id)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return mvcc.Lease{}, false, nil
	case err != nil:
		return mvcc.Lease{}, false, r.fail("read lease", err)
	}
	return mvcc.Lease{ID: id, TTL: ttl}, true, nil
}

// Alarms implements mvcc.ReadTx.
func (r *reader) Alarms(ctx context.Context) ([]*pb.AlarmMember, error) {
	rows, err := r.query(ctx, false, qAlarms)
	if err != nil {
		return nil, r.fail("read alarms", err)
	}
	defer rows.Close()
	var out []*pb.AlarmMember
	for rows.Next() {
		var member int64 // see memberColumn
		var typ int32
		if err := rows.Scan(&member, &typ); err != nil {
			return nil, r.fail("read alarms: scan", err)
		}
		out = append(out, &pb.AlarmMember{MemberID: uint64(member), Alarm: pb.AlarmType(typ)})
	}
	if err := rows.Err(); err != nil {
		return nil, r.fail("read alarms", err)
	}
	return out, nil
}

// LeaseKeys implements mvcc.ReadTx. Lease 0 (no lease) asks for the live
// keys that are not in leased: the key index's, less those. The server
// never asks for them.
func (r *reader) LeaseKeys(ctx context.Context, id int64) ([][]byte, error) {
	if id != 0 {
		keys, _, err := r.leasedKeys(ctx, qLeaseKeys, id)
		return keys, err
	}
	_, leased, err := r.leasedKeys(ctx, qLeasedKeys)
	if err != nil {
		return nil, err
	}
	var out [][]byte
	r.idx.scan(nil, nil, true, lastID(r.latest), func(key string, _ int64) bool {
		if _, ok := leased[key]; !ok {
			out = append(out, []byte(key))
		}
		return true
	})
	return out, nil
}

// leasedKeys runs qLeaseKeys (keys in order) or qLeasedKeys (keys and
// their leases, as a set).
func (r *reader) leasedKeys(ctx context.Context, stmt stmtID, args ...any) ([][]byte, map[string]int64, error) {
	rows, err := r.query(ctx, false, stmt, args...)
	if err != nil {
		return nil, nil, r.fail("read lease keys", err)
	}
	defer rows.Close()
	var (
		keys [][]byte
		set  map[string]int64
		k    []byte
		l    int64
	)
	dest := []any{blob{&k}}
	if stmt == qLeasedKeys {
		set = map[string]int64{}
		dest = append(dest, i64{&l})
	}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return nil, nil, r.fail("read lease keys: scan", err)
		}
		if set != nil {
			set[string(k)] = l
		} else {
			keys = append(keys, k)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, r.fail("read lease keys", err)
	}
	return keys, set, nil
}

// AuthState implements mvcc.ReadTx. An empty state that was stored comes
// back empty, not nil: nil means none was ever stored.
func (r *reader) AuthState(ctx context.Context) ([]byte, error) {
	var state []byte
	err := r.queryRow(ctx, true, qAuthState, []any{blob{&state}})
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, r.fail("read auth state", err)
	}
	if state == nil {
		state = []byte{}
	}
	return state, nil
}

// Rollback ends the read transaction and returns its connection to the
// pool. A connection whose ROLLBACK failed may still be inside the
// transaction, so it is replaced rather than reused.
func (t *readTx) Rollback() error {
	if t.done {
		return nil
	}
	t.done = true
	defer t.b.idx.endRead(t.gen)
	_, err := t.rc.rollback.ExecContext(context.Background())
	if err == nil {
		t.b.readers.put(t.rc)
		return nil
	}
	err = fmt.Errorf("end read: %w", err)
	rc, oerr := t.b.openReadConn(context.Background())
	if oerr != nil {
		// Keep the old connection rather than shrink the pool for good: the
		// next BEGIN on it fails, and is answered as an error.
		t.b.readers.put(t.rc)
		return errors.Join(err, oerr)
	}
	t.b.replaceReadConn(t.rc, rc)
	return err
}

// blob scans a BLOB column without a second copy. modernc.org/sqlite copies
// every blob out of SQLite into a fresh Go slice before database/sql sees
// it, so the slice handed to Scan is already the row's own; scanning into
// *[]byte would copy each value again (a tenth of a large list's CPU).
type blob struct{ dst *[]byte }

func (b blob) Scan(src any) error {
	switch v := src.(type) {
	case []byte:
		*b.dst = v
	case string:
		*b.dst = []byte(v)
	case nil:
		*b.dst = nil
	default:
		return fmt.Errorf("scan blob: unexpected %T", src)
	}
	return nil
}

// i64 scans an INTEGER column without database/sql's reflection, which
// it otherwise uses for every *int64 destination.
type i64 struct{ dst *int64 }

func (d i64) Scan(src any) error {
	v, ok := src.(int64)
	if !ok {
		return fmt.Errorf("scan integer: unexpected %T", src)
	}
	*d.dst = v
	return nil
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
