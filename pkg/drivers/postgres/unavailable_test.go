package postgres

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/kite-db/kite/pkg/mvcc"
)

func TestUnavailable(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{&pgconn.PgError{Code: "57P01", Message: "terminating connection due to administrator command"}, true},
		{&pgconn.PgError{Code: "08006", Message: "connection failure"}, true},
		{&pgconn.PgError{Code: "53300", Message: "too many connections"}, true},
		{fmt.Errorf("commit: %w", &pgconn.PgError{Code: "57P03"}), true},
		{&pgconn.PgError{Code: "23505", Message: "duplicate key"}, false},
		{&pgconn.PgError{Code: "22001", Message: "value too long"}, false},
		{errors.New("sub-revision out of range"), false},
		{context.Canceled, false},
	} {
		got := errors.Is(unavailable(tt.err), mvcc.ErrUnavailable)
		if got != tt.want {
			t.Errorf("unavailable(%v) wraps ErrUnavailable = %v; want %v", tt.err, got, tt.want)
		}
	}
}

// Postgres' disk_full is mvcc.ErrDiskFull whatever wraps it, and still
// not unavailable: retrying does not free space.
func TestClassifyDiskFull(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{&pgconn.PgError{Code: "53100", Message: "could not extend file: No space left on device"}, true},
		{fmt.Errorf("commit: %w", &pgconn.PgError{Code: "53100"}), true},
		{&pgconn.PgError{Code: "53200", Message: "out of memory"}, false},
		{&pgconn.PgError{Code: "57P01"}, false},
	} {
		err := classify(tt.err)
		if got := errors.Is(err, mvcc.ErrDiskFull); got != tt.want {
			t.Errorf("classify(%v) wraps ErrDiskFull = %v; want %v", tt.err, got, tt.want)
		}
		if tt.want && errors.Is(err, mvcc.ErrUnavailable) {
			t.Errorf("classify(%v) is ErrUnavailable", tt.err)
		}
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) {
			t.Errorf("classify(%v) lost the PgError", tt.err)
		}
	}
}
