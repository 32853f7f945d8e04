package postgres

import (
	"context"
	"testing"

	"github.com/kite-db/kite/pkg/drivers/postgres/pgtest"
)

// TestWriteIdleTimeout: a write transaction carries its idle bound, and a
// read transaction after it (on the same pooled connection) does not.
func TestWriteIdleTimeout(t *testing.T) {
	ctx := context.Background()
	b, err := Open(ctx, pgtest.NewDatabase(t), Options{MaxOpenConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	show := func(r *reader) string {
		var v string
		if _, err := r.queryRow(ctx, true, "SHOW idle_in_transaction_session_timeout", []any{&v}); err != nil {
			t.Fatal(err)
		}
		return v
	}
	w, err := b.BeginWrite(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v := show(&w.(*writeTx).reader); v != "30s" {
		t.Errorf("write transaction idle timeout %q, want 30s", v)
	}
	if err := w.Rollback(); err != nil {
		t.Fatal(err)
	}
	r, err := b.BeginRead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Rollback()
	if v := show(&r.(*readTx).reader); v != "0" {
		t.Errorf("read transaction idle timeout %q, want 0 (the server default)", v)
	}
}
