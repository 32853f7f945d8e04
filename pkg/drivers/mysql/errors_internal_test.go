package mysql

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/kite-db/kite/pkg/mvcc"
)

func TestClassify(t *testing.T) {
	tests := []struct {
		err  error
		want error // nil: left as it is
	}{
		{&gomysql.MySQLError{Number: erDiskFull}, mvcc.ErrDiskFull},
		{&gomysql.MySQLError{Number: erRecordFileFull}, mvcc.ErrDiskFull},
		// ENOSPC in the errors that carry an errno, as MariaDB and MySQL
		// word them; another errno is not a full disk.
		{&gomysql.MySQLError{Number: erGetErrno, Message: `Got error 28 "No space left on device" from storage engine InnoDB`}, mvcc.ErrDiskFull},
		{&gomysql.MySQLError{Number: erGetErrno, Message: "Got error 28 - 'No space left on device' from storage engine"}, mvcc.ErrDiskFull},
		{&gomysql.MySQLError{Number: erErrorOnWrite, Message: `Error writing file './kite/kite_log.ibd' (errno: 28 "No space left on device")`}, mvcc.ErrDiskFull},
		{&gomysql.MySQLError{Number: eeWrite, Message: `Error writing file '/tmp/MLfd=5' (Errcode: 28 "No space left on device")`}, mvcc.ErrDiskFull},
		{&gomysql.MySQLError{Number: erGetErrno, Message: `Got error 128 "Too many active concurrent transactions" from storage engine InnoDB`}, nil},
		{&gomysql.MySQLError{Number: erErrorOnWrite, Message: `Error writing file 'x' (errno: 5 "Input/output error")`}, nil},
		{&gomysql.MySQLError{Number: 1062, Message: "Duplicate entry 'error 28' for key 'PRIMARY'"}, nil},
		{&gomysql.MySQLError{Number: erConCount}, mvcc.ErrUnavailable},
		{&gomysql.MySQLError{Number: erServerShutdown}, mvcc.ErrUnavailable},
		{&gomysql.MySQLError{Number: erOptionPreventsRO}, mvcc.ErrUnavailable},
		{&gomysql.MySQLError{Number: erConnectionKilled}, mvcc.ErrUnavailable},
		{fmt.Errorf("read: %w", driver.ErrBadConn), mvcc.ErrUnavailable},
		{gomysql.ErrInvalidConn, mvcc.ErrUnavailable},
		{io.ErrUnexpectedEOF, mvcc.ErrUnavailable},
		{&gomysql.MySQLError{Number: 1062}, nil},                        // duplicate key: a statement's error
		{&gomysql.MySQLError{Number: erLockDeadlock}, mvcc.ErrConflict}, // deadlock, lost certification
		{&gomysql.MySQLError{Number: erWsrepNotReady}, mvcc.ErrUnavailable},
		{&gomysql.MySQLError{Number: erErrorDuringCommit, Message: `Got error 6 "No such device or address" during COMMIT`}, mvcc.ErrUnavailable},
		{&gomysql.MySQLError{Number: erErrorDuringCommit, Message: `Got error 28 "No space left on device" during COMMIT`}, mvcc.ErrDiskFull},
		{&gomysql.MySQLError{Number: erLockWaitTimeout}, mvcc.ErrUnavailable},
		{&gomysql.MySQLError{Number: erQueryInterrupted}, mvcc.ErrUnavailable},
		{errors.New("other"), nil},
	}
	for _, tc := range tests {
		got := classify(tc.err)
		if !errors.Is(got, tc.err) {
			t.Errorf("classify(%v) = %v lost the cause", tc.err, got)
		}
		for _, s := range []error{mvcc.ErrDiskFull, mvcc.ErrUnavailable, mvcc.ErrConflict} {
			if errors.Is(got, s) != (s == tc.want) {
				t.Errorf("classify(%v) = %v: errors.Is %v = %v", tc.err, got, s, errors.Is(got, s))
			}
		}
	}
	if classify(nil) != nil {
		t.Errorf("classify(nil) is not nil")
	}
}

func TestTablespacePrefix(t *testing.T) {
	for _, c := range []struct {
		db, want string
		ok       bool
	}{
		{"kite", "kite/", true},
		{"k3s_DB9", "k3s_DB9/", true},
		{"kite-x", "kite@002dx/", true},
		{"a.b c", "a@002eb@0020c/", true},
		{"kité", "", false},
	} {
		got, ok := tablespacePrefix(c.db)
		if got != c.want || ok != c.ok {
			t.Errorf("tablespacePrefix(%q) = %q, %v; want %q, %v", c.db, got, ok, c.want, c.ok)
		}
	}
}
