package mysql

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/kite-db/kite/pkg/mvcc"
)

// Write transactions on a Galera node.
//
// Writers on two nodes do not wait for each other's row locks: both run,
// and the one whose write set is ordered second loses at certification
// (error 1213 at COMMIT), or is aborted by the applier of the first while
// it runs (a brute-force abort). The Store applies a lost batch again
// (mvcc.ErrConflict). What kite must make sure of is that nothing of a
// lost transaction is ever committed. A brute-force abort rolls the
// transaction back from another thread, and TestGalera saw statements
// that kite sent afterwards run outside any transaction, each committed
// on its own under autocommit: a log row committed without the revision
// row's update, or a whole batch committed piecemeal while kite was told
// the transaction failed. So on Galera a write transaction
//   - runs with autocommit off, so a statement that finds its transaction
//     gone opens a new one instead of committing by itself;
//   - sets a savepoint as it begins and releases it just before COMMIT,
//     in the same round trip: a transaction rolled back meanwhile has lost
//     the savepoint, the release fails (error 1305, taken as a conflict),
//     and the statements since are rolled back with the new transaction;
//   - reads its last log row back after COMMIT: a COMMIT that found the
//     transaction already rolled back commits nothing, and the batch is
//     then applied again rather than acknowledged.
const (
	sqlGaleraBeginWrite = `SET autocommit = 0; ` + sqlBeginWrite + `; SAVEPOINT kite`
	sqlGaleraCommit     = `RELEASE SAVEPOINT kite; COMMIT; SET autocommit = 1`
	sqlLogRowKey        = `SELECT k FROM kite_log WHERE rev = ? AND sub = ?`
)

// beginWriteSQL is the statement that begins a write transaction.
func (b *Backend) beginWriteSQL() string {
	if b.galera {
		return sqlGaleraBeginWrite
	}
	return sqlBeginWrite
}

// logMark is a log row of the transaction, for verifyCommitted.
type logMark struct {
	rev int64
	sub int32
	key []byte
}

// noteLog remembers the newest log row the transaction writes.
func (w *writeTx) noteLog(rev int64, sub int32, key []byte) {
	if rev >= w.mark.rev {
		w.mark = logMark{rev: rev, sub: sub, key: key}
	}
}

// verifyCommitted checks, after a COMMIT on a Galera node, that the
// transaction's newest log row is in the log.
func (w *writeTx) verifyCommitted(ctx context.Context) error {
	if w.mark.key == nil {
		return nil
	}
	var k []byte
	err := w.conn.QueryRowContext(ctx, sqlLogRowKey, w.mark.rev, w.mark.sub).Scan(&k)
	switch {
	case errors.Is(err, sql.ErrNoRows) || err == nil && !bytes.Equal(k, w.mark.key):
		return fmt.Errorf("%w: COMMIT returned but revision %d is not this transaction's (it was rolled back before COMMIT)", mvcc.ErrConflict, w.mark.rev)
	case err != nil:
		// The outcome is unknown, as after a connection lost at COMMIT.
		return fmt.Errorf("%w: check the commit of revision %d: %w", mvcc.ErrUnavailable, w.mark.rev, err)
	}
	return nil
}
