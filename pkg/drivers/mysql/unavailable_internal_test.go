package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/kite-db/kite/pkg/drivers/mysql/mysqltest"
	"github.com/kite-db/kite/pkg/mvcc"
)

func connectionID(t *testing.T, conn *sql.Conn) int64 {
	t.Helper()
	var id int64
	if err := conn.QueryRowContext(context.Background(), "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// TestKilledConnection: a transaction whose session the server ends (a
// restart, a failover, an operator's KILL) fails with mvcc.ErrUnavailable,
// its connection is not reused, and the next transaction works.
func TestKilledConnection(t *testing.T) {
	ctx := context.Background()
	dsn := mysqltest.NewDatabase(t)
	admin := mysqltest.Open(t, dsn)
	b, err := Open(ctx, dsn, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	kill := func(conn *sql.Conn) {
		t.Helper()
		if _, err := admin.Exec(fmt.Sprintf("KILL CONNECTION %d", connectionID(t, conn))); err != nil {
			t.Fatal(err)
		}
	}

	r, err := b.BeginRead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	kill(r.(*readTx).conn)
	if _, err := r.Get(ctx, []byte("k")); !errors.Is(err, mvcc.ErrUnavailable) {
		t.Errorf("Get on a killed session: %v, want ErrUnavailable", err)
	}
	if err := r.Rollback(); err == nil {
		t.Errorf("Rollback on a killed session succeeded")
	}

	w, err := b.BeginWrite(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Put(ctx, &mvccpb.KeyValue{Key: []byte("k"), Value: []byte("v"), CreateRevision: 1,
		ModRevision: 1, Version: 1}, 0); err != nil {
		t.Fatal(err)
	}
	if err := w.SetRevisions(ctx, 1, 0); err != nil {
		t.Fatal(err)
	}
	kill(w.(*writeTx).conn)
	if err := w.Commit(); !errors.Is(err, mvcc.ErrUnavailable) {
		t.Errorf("Commit on a killed session: %v, want ErrUnavailable", err)
	}

	// The pool hands out live connections, and the writer's lock was let go.
	for range 3 {
		if kv, current, _, err := b.GetLatest(ctx, []byte("k")); err != nil || kv != nil || current != 0 {
			t.Fatalf("GetLatest after the kills = %v, %d, %v; want nothing at revision 0", kv, current, err)
		}
	}
	w, err = b.BeginWrite(ctx)
	if err != nil {
		t.Fatalf("BeginWrite after a failed commit: %v", err)
	}
	if err := w.Rollback(); err != nil {
		t.Fatal(err)
	}
}
