package mysql_test

import (
	"context"
	"errors"
	"testing"

	"github.com/kite-db/kite/pkg/drivers/mysql"
	"github.com/kite-db/kite/pkg/drivers/mysql/mysqltest"
	"github.com/kite-db/kite/pkg/mvcc"
	"github.com/kite-db/kite/pkg/mvcc/backendtest"
)

// recorded reads the revision row's record of the last write's server.
func recorded(t *testing.T, dsn string) (rev int64, writer *int64, synced bool, serverID int64) {
	t.Helper()
	err := mysqltest.Open(t, dsn).QueryRow(`SELECT current_rev, writer, synced, @@server_id FROM kite_revision`).
		Scan(&rev, &writer, &synced, &serverID)
	if err != nil {
		t.Fatal(err)
	}
	return rev, writer, synced, serverID
}

// openStore opens a Backend and a Store on dsn, as a kite server starting
// does, closing both when t ends.
func openStore(t *testing.T, dsn string) (*mvcc.Store, error) {
	t.Helper()
	ctx := context.Background()
	b, err := mysql.Open(ctx, dsn, mysql.Options{})
	if err != nil {
		return nil, err
	}
	s, err := mvcc.Open(ctx, b, mvcc.Config{})
	if err != nil {
		b.Close()
		return nil, err
	}
	t.Cleanup(func() {
		s.Close()
		b.Close()
	})
	return s, nil
}

// TestHistoryLost: every write records the server it went to. A database
// whose last write went, without Galera, to another server than the one
// serving it now (a promoted asynchronous replica) is refused with
// mvcc.ErrHistoryLost by a running Backend (for good: the row put back
// does not lift it) and by a server starting on it, until the operator
// accepts it (AcceptHistory). A Galera write, and a database that
// recorded nothing yet, are served. The same with a real replica is
// test/TestMySQLFailoverLostHistory.
func TestHistoryLost(t *testing.T) {
	ctx := context.Background()
	dsn := mysqltest.NewDatabase(t)
	db := mysqltest.Open(t, dsn)
	b := mustOpen(t, dsn)

	if _, writer, _, _ := recorded(t, dsn); writer != nil {
		t.Fatalf("a fresh database records server %d, want none", *writer)
	}
	rev := backendtest.CommitNext(t, b, "k1", nil)
	_, writer, synced, id := recorded(t, dsn)
	if writer == nil || *writer != id || synced {
		t.Fatalf("after a write the row records server %v (synced %v), want %d, not synced", writer, synced, id)
	}

	// The revision row now says the last write went to another server.
	if _, err := db.Exec(`UPDATE kite_revision SET writer = @@server_id + 1, synced = FALSE`); err != nil {
		t.Fatal(err)
	}
	_, _, _, err := b.GetLatest(ctx, []byte("k1"))
	if !errors.Is(err, mvcc.ErrHistoryLost) {
		t.Fatalf("GetLatest on a database served by another server: %v, want ErrHistoryLost", err)
	}
	if _, err := db.Exec(`UPDATE kite_revision SET writer = @@server_id`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.BeginRead(ctx); !errors.Is(err, mvcc.ErrHistoryLost) {
		t.Errorf("BeginRead after the refusal: %v, want ErrHistoryLost still", err)
	}
	if _, err := b.BeginWrite(ctx); !errors.Is(err, mvcc.ErrHistoryLost) {
		t.Errorf("BeginWrite after the refusal: %v, want ErrHistoryLost still", err)
	}

	// A server starting on it refuses too, whichever path reads first.
	if _, err := db.Exec(`UPDATE kite_revision SET writer = @@server_id + 1`); err != nil {
		t.Fatal(err)
	}
	if _, err := openStore(t, dsn); !errors.Is(err, mvcc.ErrHistoryLost) {
		t.Fatalf("a server starting on the database: %v, want ErrHistoryLost", err)
	}
	fresh := mustOpen(t, dsn)
	if _, err := fresh.BeginWritePrefetch(ctx, [][]byte{[]byte("k1")}); !errors.Is(err, mvcc.ErrHistoryLost) {
		t.Errorf("a write with a prefetch: %v, want ErrHistoryLost", err)
	}

	// Accepted: served again, and the next write records this server.
	before, after, err := mysql.AcceptHistory(ctx, dsn, nil)
	if err != nil {
		t.Fatal(err)
	}
	if before.Err() == nil || after.Err() != nil || after.Rev != rev || after.Recorded.Int64 != id {
		t.Fatalf("AcceptHistory: before %+v (%v), after %+v (%v); want a loss accepted at revision %d on server %d",
			before, before.Err(), after, after.Err(), rev, id)
	}
	s, err := openStore(t, dsn)
	if err != nil {
		t.Fatalf("a server starting after accept-history: %v", err)
	}
	if cur, _ := s.Revisions(); cur != rev {
		t.Errorf("the accepted database serves revision %d, want %d", cur, rev)
	}

	// A Galera write was certified by every node: another node is fine.
	if _, err := db.Exec(`UPDATE kite_revision SET writer = @@server_id + 1, synced = TRUE`); err != nil {
		t.Fatal(err)
	}
	if _, err := openStore(t, dsn); err != nil {
		t.Errorf("a server starting after a Galera write through another node: %v", err)
	}
	// A database of schema version 2 recorded nothing: served, and
	// recorded by its next write.
	if _, err := db.Exec(`UPDATE kite_revision SET writer = NULL, synced = FALSE`); err != nil {
		t.Fatal(err)
	}
	other := mustOpen(t, dsn)
	backendtest.CommitNext(t, other, "k2", nil)
	if _, writer, _, _ := recorded(t, dsn); writer == nil || *writer != id {
		t.Errorf("after a write on a database that recorded nothing: server %v, want %d", writer, id)
	}
}
