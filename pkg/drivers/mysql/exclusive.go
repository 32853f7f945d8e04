package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// ErrDatabaseInUse: another kite server has the database open. Until this
// driver implements mvcc.Shared (the servers telling each other of their
// commits, one of them expiring leases), a second server on the same
// database would serve a stale copy of it and watchers that never hear of
// the first one's writes; it is refused instead.
var ErrDatabaseInUse = errors.New("mysql: another kite server has this database open (one kite server per MySQL database, for now)")

// sqlExclusiveLock names the lock after the database (named locks are
// server-wide) and does not wait: a server that finds it taken stops with
// ErrDatabaseInUse instead of queueing behind the one that runs.
const sqlExclusiveLock = `SELECT GET_LOCK(CONCAT('kite:server:', SHA1(DATABASE())), 0)`

// lockExclusive takes the database's server lock on a connection of its
// own, held until Close: the lock lives as long as the session, so a
// server that dies, or loses its connection, frees the database for the
// next one with nothing to clean up.
func (b *Backend) lockExclusive(ctx context.Context) error {
	conn, err := b.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("server lock: connect: %w", err)
	}
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, sqlExclusiveLock).Scan(&got); err != nil {
		return errors.Join(fmt.Errorf("server lock: %w", err), conn.Close())
	}
	if !got.Valid || got.Int64 != 1 {
		return errors.Join(ErrDatabaseInUse, conn.Close())
	}
	b.exclusive = conn
	return nil
}
