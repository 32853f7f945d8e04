package mysql

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/kite-db/kite/pkg/mvcc"
)

// classify marks a database error with the store's sentinel for its cause,
// so the store recognises it by errors.Is rather than by the server's
// text: out of reach (mvcc.ErrUnavailable), a full disk
// (mvcc.ErrDiskFull), or a transaction aborted for a concurrent one
// (mvcc.ErrConflict), which the Store applies again.
func classify(err error) error {
	if err == nil || errors.Is(err, mvcc.ErrUnavailable) || errors.Is(err, mvcc.ErrDiskFull) || errors.Is(err, mvcc.ErrConflict) {
		return err
	}
	switch {
	case isConflict(err):
		return fmt.Errorf("%w: %w", mvcc.ErrConflict, err)
	case isDiskFull(err):
		return fmt.Errorf("%w: %w", mvcc.ErrDiskFull, err)
	case isConnectionError(err):
		return fmt.Errorf("%w: %w", mvcc.ErrUnavailable, err)
	}
	return err
}

// Server error numbers (MySQL's and MariaDB's, which agree on these).
const (
	erDiskFull          = 1021 // ER_DISK_FULL
	erRecordFileFull    = 1114 // ER_RECORD_FILE_FULL: "The table is full"
	eeWrite             = 3    // EE_WRITE: "Error writing file ... (Errcode: n ...)"
	erErrorOnWrite      = 1026 // ER_ERROR_ON_WRITE: "Error writing file ... (errno: n ...)"
	erGetErrno          = 1030 // ER_GET_ERRNO: "Got error n ... from storage engine"
	erConCount          = 1040 // ER_CON_COUNT_ERROR: too many connections
	erServerShutdown    = 1053 // ER_SERVER_SHUTDOWN
	erOptionPreventsRO  = 1290 // ER_OPTION_PREVENTS_STATEMENT: --read-only, a replica
	erConnectionKilled  = 1927 // MariaDB's ER_CONNECTION_KILLED
	erClientIdleTimeout = 4031 // MySQL 8's ER_CLIENT_INTERACTION_TIMEOUT
	erLockDeadlock      = 1213 // ER_LOCK_DEADLOCK, also Galera's certification failure
	erSavepointGone     = 1305 // ER_SP_DOES_NOT_EXIST: a Galera write transaction rolled back under kite (galera.go)
	erWsrepNotReady     = 1047 // ER_UNKNOWN_COM_ERROR: "WSREP has not yet prepared node for application use"
	erErrorDuringCommit = 1180 // ER_ERROR_DURING_COMMIT: "Got error n ... during COMMIT", a Galera node leaving its cluster
	erLockWaitTimeout   = 1205 // ER_LOCK_WAIT_TIMEOUT, also a Galera causal read (wsrep_sync_wait) that timed out
	erQueryInterrupted  = 1317 // ER_QUERY_INTERRUPTED: KILL QUERY, a server shutting down

	erUnknownSystemVariable = 1193 // ER_UNKNOWN_SYSTEM_VARIABLE
	erDupFieldName          = 1060 // ER_DUP_FIELDNAME
	erUnknownTable          = 1109 // ER_UNKNOWN_TABLE: no such information_schema view
	erTableAccessDenied     = 1142 // ER_TABLEACCESS_DENIED_ERROR
)

// isUnknownTable reports a view this server does not have.
func isUnknownTable(err error) bool {
	var me *gomysql.MySQLError
	return errors.As(err, &me) && me.Number == erUnknownTable
}

// isDenied reports a statement this user lacks the privilege for.
func isDenied(err error) bool {
	var me *gomysql.MySQLError
	return errors.As(err, &me) && (me.Number == erSpecificDenied || me.Number == erDBAccessDenied || me.Number == erTableAccessDenied)
}

// isConflict reports a transaction the server rolled back for another's:
// an InnoDB deadlock, or on Galera a write set that lost certification to
// one from another node, or a local transaction aborted by the applier of
// one (a brute-force abort), or a Galera write transaction that lost its
// savepoint that way (galera.go). Either way nothing of it was committed.
func isConflict(err error) bool {
	var me *gomysql.MySQLError
	return errors.As(err, &me) && (me.Number == erLockDeadlock || me.Number == erSavepointGone)
}

// isDiskFull reports the server's out-of-space errors: InnoDB's "table is
// full" (a tablespace that could not grow, what a full disk gives on
// MariaDB 10.11), ER_DISK_FULL, and the errors that carry an operating
// system error number when that number is 28, ENOSPC (a failed file write,
// or MySQL's "Got error 28 from storage engine"). Those carry it in their
// text only.
func isDiskFull(err error) bool {
	var me *gomysql.MySQLError
	if !errors.As(err, &me) {
		return false
	}
	switch me.Number {
	case erDiskFull, erRecordFileFull:
		return true
	case eeWrite, erErrorOnWrite, erGetErrno, erErrorDuringCommit:
		return enospc.MatchString(me.Message)
	}
	return false
}

// enospc finds errno 28 in the server's messages, in MariaDB's and
// MySQL's spellings ("Got error 28 ...", "(errno: 28 ...", "(Errcode: 28
// ..."); the strerror text after it depends on the server's locale.
var enospc = regexp.MustCompile(`(?i)\b(?:error|errno:|errcode:) ?28\b`)

// isConnectionError reports errors of the connection rather than of the
// statement: the network, a server shutting down or refusing connections,
// a session killed or its statement interrupted, a server that only
// reads (a replica or a primary being switched over), a Galera node cut
// off from its cluster's primary component or not yet synced with it
// (its COMMIT or its causal wait fails), after which a retry may reach a
// writable one. None of these committed anything: the transaction is
// rolled back with the failed statement.
func isConnectionError(err error) bool {
	var me *gomysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case erConCount, erServerShutdown, erOptionPreventsRO, erConnectionKilled, erClientIdleTimeout, erWsrepNotReady,
			erErrorDuringCommit, erLockWaitTimeout, erQueryInterrupted:
			return true
		}
		return false
	}
	var netErr net.Error
	return errors.As(err, &netErr) || errors.Is(err, driver.ErrBadConn) ||
		errors.Is(err, gomysql.ErrInvalidConn) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}
