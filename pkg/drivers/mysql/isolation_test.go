package mysql

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/kite-db/kite/pkg/drivers/mysql/mysqltest"
)

// trxIsolation returns the isolation level and read-only flag InnoDB
// reports for the transaction open on conn. InnoDB refreshes what its
// information_schema tables show of transactions at most every 100 ms,
// so the query waits that long first: sooner, it could show an earlier
// transaction of the same connection.
func trxIsolation(t *testing.T, conn *sql.Conn) (level string, readOnly bool) {
	t.Helper()
	time.Sleep(150 * time.Millisecond)
	err := conn.QueryRowContext(context.Background(), `SELECT trx_isolation_level, trx_is_read_only
		FROM information_schema.innodb_trx WHERE trx_mysql_thread_id = CONNECTION_ID()`).Scan(&level, &readOnly)
	if err != nil {
		t.Fatalf("read the transaction's isolation level: %v", err)
	}
	return level, readOnly
}

// TestIsolationOverridesSessionDefault opens the Backend on sessions whose
// default isolation level the DSN sets (READ COMMITTED, REPEATABLE READ,
// SERIALIZABLE; snapshot isolation on and off where the server has it) and
// checks that kite's transactions run at the level kite names: read
// transactions REPEATABLE READ READ ONLY, the write transaction READ
// COMMITTED. A reader keeps its snapshot across a commit, however the
// session default would have it.
func TestIsolationOverridesSessionDefault(t *testing.T) {
	ctx := context.Background()
	isolation, snapshot := mysqltest.SessionVariables(t)
	type setting struct{ level, snapshot string }
	var settings []setting
	for _, level := range []string{"READ-COMMITTED", "REPEATABLE-READ", "SERIALIZABLE"} {
		if snapshot == "" {
			settings = append(settings, setting{level, ""})
			continue
		}
		settings = append(settings, setting{level, "ON"}, setting{level, "OFF"})
	}
	for _, s := range settings {
		name := s.level
		params := []string{mysqltest.SessionDefault(isolation, s.level)}
		if s.snapshot != "" {
			name += "/snapshot_isolation=" + s.snapshot
			params = append(params, snapshot+"="+s.snapshot)
		}
		t.Run(name, func(t *testing.T) {
			b, err := Open(ctx, mysqltest.NewDatabase(t, params...), Options{})
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer b.Close()
			// The DSN's default did reach the session.
			var got string
			if err := b.db.QueryRowContext(ctx, "SELECT @@session."+isolation).Scan(&got); err != nil || got != s.level {
				t.Fatalf("session %s = %q, %v; want %q", isolation, got, err, s.level)
			}
			put := func(value string, rev int64) {
				t.Helper()
				w, err := b.BeginWrite(ctx)
				if err != nil {
					t.Fatalf("BeginWrite: %v", err)
				}
				defer w.Rollback() // after a failure: a no-op after Commit
				level, readOnly := trxIsolation(t, w.(*writeTx).conn)
				if level != "READ COMMITTED" || readOnly {
					t.Errorf("write transaction at %s (read only %v), want READ COMMITTED", level, readOnly)
				}
				if err := w.Put(ctx, &mvccpb.KeyValue{Key: []byte("k"), Value: []byte(value),
					CreateRevision: 1, ModRevision: rev, Version: rev}, 0); err != nil {
					t.Fatalf("Put: %v", err)
				}
				if err := w.SetRevisions(ctx, rev, 0); err != nil {
					t.Fatalf("SetRevisions: %v", err)
				}
				if err := w.Commit(); err != nil {
					t.Fatalf("Commit: %v", err)
				}
			}
			put("1", 1)
			r, err := b.BeginRead(ctx)
			if err != nil {
				t.Fatalf("BeginRead: %v", err)
			}
			defer r.Rollback()
			level, readOnly := trxIsolation(t, r.(*readTx).conn)
			if level != "REPEATABLE READ" || !readOnly {
				t.Errorf("read transaction at %s (read only %v), want REPEATABLE READ, read only", level, readOnly)
			}
			put("2", 2)
			// At READ COMMITTED these reads would see revision 2.
			kv, err := r.Get(ctx, []byte("k"))
			if err != nil || kv == nil || string(kv.Value) != "1" {
				t.Errorf("Get in a read begun before the commit = %v, %v; want value 1", kv, err)
			}
			kvs, err := r.Range(ctx, []byte("k"), nil, 1, 0, false)
			if err != nil || len(kvs) != 1 || string(kvs[0].Value) != "1" {
				t.Errorf("Range in a read begun before the commit = %v, %v; want value 1", kvs, err)
			}
			if cs, err := r.Changes(ctx, 1, 10, 0, false); err != nil || len(cs) != 1 {
				t.Errorf("Changes in a read begun before the commit = %d changes, %v; want 1", len(cs), err)
			}
			kv, current, _, err := b.GetLatest(ctx, []byte("k"))
			if err != nil || current != 2 || kv == nil || string(kv.Value) != "2" {
				t.Errorf("GetLatest after the commit = %v, %d, %v; want value 2 at revision 2", kv, current, err)
			}
		})
	}
}
