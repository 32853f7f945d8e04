package postgres

import (
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/kite-db/kite/pkg/mvcc"
)

// classify marks a database error with the store's sentinel for its cause,
// so the store recognises it by errors.Is rather than by Postgres' text:
// out of reach (unavailable) or a full disk (diskFull).
func classify(err error) error { return diskFull(unavailable(err)) }

// diskFull marks Postgres' disk_full (SQLSTATE 53100: the server could not
// extend a file) with mvcc.ErrDiskFull.
func diskFull(err error) error {
	var pgErr *pgconn.PgError
	if err == nil || errors.Is(err, mvcc.ErrDiskFull) || !errors.As(err, &pgErr) || pgErr.Code != "53100" {
		return err
	}
	return fmt.Errorf("%w: %w", mvcc.ErrDiskFull, err)
}

// unavailable marks an error that comes from the database being out of
// reach (a restart, a failover, a cut connection) with mvcc.ErrUnavailable,
// so clients get etcd's retryable Unavailable code instead of Unknown. Other
// errors are returned as they are.
func unavailable(err error) error {
	if err == nil || errors.Is(err, mvcc.ErrUnavailable) || !isConnectionError(err) {
		return err
	}
	return fmt.Errorf("%w: %w", mvcc.ErrUnavailable, err)
}

// isConnectionError reports errors of the connection rather than of the
// statement: SQLSTATE classes 08 (connection exception) and 57 (operator
// intervention: shutdown, restart, crash recovery), too many connections,
// and network or protocol failures below SQL.
func isConnectionError(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case len(pgErr.Code) == 5 && (pgErr.Code[:2] == "08" || pgErr.Code[:2] == "57"):
			return true
		case pgErr.Code == "53300": // too_many_connections
			return true
		}
		return false
	}
	var netErr net.Error
	var connectErr *pgconn.ConnectError
	return errors.As(err, &netErr) || errors.As(err, &connectErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		pgconn.SafeToRetry(err) || pgconn.Timeout(err)
}
