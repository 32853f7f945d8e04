package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/kite-db/kite/pkg/mvcc"
)

// endTimeout bounds a ROLLBACK sent to end a transaction: past it the
// connection is dropped, which ends the transaction as well.
const endTimeout = 10 * time.Second

// reader holds the reads shared by read and write transactions; only the
// transaction around them differs.
type reader struct {
	conn *sql.Conn
	q    *queries

	// latest is the newest revision with rows. A read at or above it is a
	// latest read and is served from kite_live; the write transaction
	// raises it as it appends rows.
	latest int64

	// pending holds a write transaction's writes not yet sent (nil in a
	// read transaction); a read sends them first, in the same round trip.
	pending *pending
	packet  int

	// sticky makes the first error final (write transactions): MySQL
	// keeps a transaction open after a failed statement, with the
	// statement's effects undone but those before it kept, and nothing
	// after such a failure may commit.
	sticky bool
	err    error
}

var _ mvcc.ReadTx = (*readTx)(nil)

// readTx is a REPEATABLE READ READ ONLY transaction whose snapshot is
// taken when it starts (WITH CONSISTENT SNAPSHOT): every read of it sees
// the same committed state. Reads take no locks, so neither the writer nor
// innodb_snapshot_isolation ever makes one wait or fail.
type readTx struct {
	reader
	current, compacted int64
	done               bool
}

// BeginRead implements mvcc.Backend. The isolation level, the start of
// the transaction and the revisions query go in one round trip; the
// transaction outlives ctx (each read has its own).
func (b *Backend) BeginRead(ctx context.Context) (mvcc.ReadTx, error) {
	if b.closed.Load() {
		return nil, mvcc.ErrClosed
	}
	if err := b.historyLost(); err != nil {
		return nil, err
	}
	conn, err := b.db.Conn(ctx)
	if err != nil {
		return nil, classify(fmt.Errorf("begin read: connect: %w", err))
	}
	t := &readTx{reader: reader{conn: conn, q: b.q, packet: b.packet}}
	var h History
	err = queryRowAfter(ctx, conn, sqlBeginRead, nil, sqlRevisions, nil, append([]any{&t.current, &t.compacted}, h.scanTargets()...)...)
	if err == nil {
		h.Rev = t.current
		err = b.checkHistory(h)
	}
	if err != nil {
		return nil, classify(errors.Join(fmt.Errorf("begin read: %w", err), endTx(conn)))
	}
	t.latest = t.current
	return t, nil
}

// Revisions implements mvcc.ReadTx: the snapshot's, read at begin.
func (t *readTx) Revisions(context.Context) (current, compacted int64, err error) {
	return t.current, t.compacted, nil
}

// Rollback implements mvcc.ReadTx and returns the connection to the pool.
func (t *readTx) Rollback() error {
	if t.done {
		return nil
	}
	t.done = true
	if err := endTx(t.conn); err != nil {
		return fmt.Errorf("end read: %w", err)
	}
	return nil
}

// endTx rolls back whatever transaction conn is in and returns it to the
// pool. A connection whose ROLLBACK failed may still be inside a
// transaction: it is discarded rather than reused.
func endTx(conn *sql.Conn) error {
	ctx, cancel := context.WithTimeout(context.Background(), endTimeout)
	defer cancel()
	// autocommit is back on for the pool: a Galera write transaction
	// turns it off (galera.go).
	if _, err := conn.ExecContext(ctx, "ROLLBACK; SET autocommit = 1"); err != nil {
		discard(conn)
		return err
	}
	return conn.Close()
}

// discard closes conn's underlying connection instead of returning it to
// the pool.
func discard(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = conn.Close()
}

// fail wraps err with what was being done and, in a write transaction,
// poisons it.
func (r *reader) fail(what string, err error) error {
	err = classify(fmt.Errorf("%s: %w", what, err))
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

// query runs a read. In a write transaction the pending writes go first,
// in the same round trip, so the read sees them.
func (r *reader) query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return r.queryAfter(ctx, true, query, args...)
}

// queryAfter is query; with flush false the pending writes stay pending,
// for a read that they cannot change.
func (r *reader) queryAfter(ctx context.Context, flush bool, query string, args ...any) (*sql.Rows, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	if !flush || r.pending == nil || r.pending.empty() {
		return r.conn.QueryContext(ctx, query, args...)
	}
	batches := r.pending.batches(r.packet)
	r.pending.reset()
	last := len(batches) - 1
	for _, b := range batches[:last] {
		if _, err := r.conn.ExecContext(ctx, b.sql, b.args...); err != nil {
			return nil, fmt.Errorf("send pending writes: %w", err)
		}
	}
	return queryAfter(ctx, r.conn, batches[last].sql, batches[last].args, query, args)
}

// queryRow runs a one-row read; found is false when it returns no row.
func (r *reader) queryRow(ctx context.Context, flush bool, query string, dest []any, args ...any) (found bool, err error) {
	rows, err := r.queryAfter(ctx, flush, query, args...)
	if err != nil {
		return false, err
	}
	defer rows.Close()
	if rows.Next() {
		found = true
		if err := rows.Scan(dest...); err != nil {
			return false, err
		}
	}
	if err := rows.Close(); err != nil {
		return false, err
	}
	return found, rows.Err()
}

// queryAfter sends pre (statements without results) and query as one
// multi-statement query, one round trip, and returns the rows of query.
// An error in pre stops the server before query runs.
func queryAfter(ctx context.Context, conn *sql.Conn, pre string, preArgs []any, query string, args []any) (*sql.Rows, error) {
	all := make([]any, 0, len(preArgs)+len(args))
	all = append(append(all, preArgs...), args...)
	rows, err := conn.QueryContext(ctx, pre+"; "+query, all...)
	if err != nil {
		return nil, err
	}
	for {
		cols, err := rows.Columns()
		if err != nil {
			return nil, errors.Join(err, rows.Close())
		}
		if len(cols) > 0 {
			return rows, nil
		}
		if !rows.NextResultSet() {
			err := rows.Err()
			if err == nil {
				err = errors.New("the query returned no result set")
			}
			return nil, errors.Join(err, rows.Close())
		}
	}
}

// queryRowAfter is queryAfter for a query of one row, which must exist.
func queryRowAfter(ctx context.Context, conn *sql.Conn, pre string, preArgs []any, query string, args []any, dest ...any) error {
	rows, err := queryAfter(ctx, conn, pre, preArgs, query, args)
	if err != nil {
		return err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return sql.ErrNoRows
	}
	if err := rows.Scan(dest...); err != nil {
		return err
	}
	return rows.Close()
}
