package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kite-db/kite/pkg/mvcc"
)

// reader holds the reads shared by read and write transactions; only the
// transaction around them differs.
type reader struct {
	conn *pgx.Conn
	q    *queries

	// latest is the newest revision with rows. A read at or above it is a
	// latest read and is served from kite_live; the write transaction raises
	// it as it appends rows.
	latest int64

	// unsent holds a write transaction's writes not yet sent (nil in a read
	// transaction). A read sends them first, in the same round trip.
	unsent *unsentWrites

	// sticky makes the first error final (write transactions): Postgres
	// aborts the transaction on an error, and nothing after it may commit.
	sticky bool
	err    error
}

var _ mvcc.ReadTx = (*readTx)(nil)

// readTx is a REPEATABLE READ READ ONLY transaction on a pool connection:
// one snapshot for all its reads, taken by the revisions query at begin.
type readTx struct {
	reader
	pc                 *pgxpool.Conn
	current, compacted int64
	done               bool
}

// BeginRead implements mvcc.Backend. BEGIN and the revisions query go in
// one round trip; the transaction outlives ctx (each read has its own).
func (b *Backend) BeginRead(ctx context.Context) (mvcc.ReadTx, error) {
	if b.closed.Load() {
		return nil, mvcc.ErrClosed
	}
	if err := b.historyLost(); err != nil {
		return nil, err
	}
	pc, err := b.pool.Acquire(ctx)
	if err != nil {
		return nil, classify(fmt.Errorf("begin read: acquire connection: %w", err))
	}
	t := &readTx{reader: reader{conn: pc.Conn(), q: b.q}, pc: pc}
	batch := &pgx.Batch{}
	batch.Queue(sqlBeginRead)
	batch.Queue(sqlRevisions).QueryRow(func(row pgx.Row) error { return row.Scan(&t.current, &t.compacted) })
	if err := pc.SendBatch(ctx, batch).Close(); err != nil {
		return nil, classify(errors.Join(fmt.Errorf("begin read: %w", err), endTx(pc)))
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
	if err := endTx(t.pc); err != nil {
		return fmt.Errorf("end read: %w", err)
	}
	return nil
}

// endTx rolls back whatever transaction pc is in and releases it. A
// connection still inside a transaction afterwards (ROLLBACK failed) is
// closed by the pool rather than reused.
func endTx(pc *pgxpool.Conn) error {
	defer pc.Release()
	conn := pc.Conn()
	if conn.IsClosed() || conn.PgConn().TxStatus() == 'I' {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), endTimeout)
	defer cancel()
	_, err := conn.Exec(ctx, "ROLLBACK")
	return err
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
// pipelined with the read in one round trip, so the read sees them.
func (r *reader) query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return r.queryAfter(ctx, true, sql, args...)
}

// queryAfter is query; with flush false the pending writes stay pending,
// for a read that they cannot change.
func (r *reader) queryAfter(ctx context.Context, flush bool, sql string, args ...any) (pgx.Rows, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	if !flush || r.unsent == nil || r.unsent.empty() {
		return r.conn.Query(ctx, sql, args...)
	}
	b := &pgx.Batch{}
	n := r.unsent.queue(b)
	b.Queue(sql, args...)
	br := r.conn.SendBatch(ctx, b)
	r.unsent.reset()
	for range n {
		if _, err := br.Exec(); err != nil {
			return nil, errors.Join(fmt.Errorf("send pending writes: %w", err), br.Close())
		}
	}
	rows, err := br.Query()
	if err != nil {
		return nil, errors.Join(err, br.Close())
	}
	return &batchRows{Rows: rows, br: br}, nil
}

// batchRows are the rows of the last query of a batch; the batch is
// closed, reading its final sync, as soon as the rows are exhausted.
type batchRows struct {
	pgx.Rows
	br     pgx.BatchResults
	closed bool
	err    error
}

func (b *batchRows) Next() bool {
	if b.Rows.Next() {
		return true
	}
	b.Close()
	return false
}

func (b *batchRows) Close() {
	if b.closed {
		return
	}
	b.closed = true
	b.Rows.Close()
	b.err = b.br.Close()
}

func (b *batchRows) Err() error {
	if err := b.Rows.Err(); err != nil {
		return err
	}
	return b.err
}

// queryRow runs a one-row read; found is false when it returns no row.
func (r *reader) queryRow(ctx context.Context, flush bool, sql string, dest []any, args ...any) (found bool, err error) {
	rows, err := r.queryAfter(ctx, flush, sql, args...)
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
	rows.Close()
	return found, rows.Err()
}
