//go:build unix

package mysqltest

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
)

// TestGalera runs a 3-node cluster and checks what kite's multi-primary
// design rests on (docs/galera-notes.md): writes on any node reach all,
// of two conflicting writers on two nodes one fails with error 1213, a
// row lock and a GET_LOCK hold on their own node only, wsrep_sync_wait makes a read wait for what the cluster committed, and a
// killed node rejoins with the writes it missed.
func TestGalera(t *testing.T) {
	top := t
	began := time.Now()
	g := NewGalera(t, 3)
	t.Logf("3 nodes Synced in %v", time.Since(began).Round(time.Millisecond))

	g.Exec(t, 0, "CREATE DATABASE kite_galera",
		"CREATE TABLE kite_galera.t (k INT PRIMARY KEY, v INT NOT NULL) ENGINE=InnoDB")
	dbs := make([]*sql.DB, 3)
	for i := range dbs {
		dbs[i] = galeraDB(t, g, i)
	}
	// The CREATE TABLE replicates in total order but is applied on each
	// node in its own time, and a write that reaches a node while it is
	// still applying the DDL is aborted by it (error 1213, seen in CI):
	// every node has applied it once a causal read of the table returns.
	for i := range dbs {
		syncedCount(t, dbs[i])
	}

	t.Run("WritesEverywhere", func(t *testing.T) {
		for k := 1; k <= 20; k++ {
			node := 1 + (k-1)/10 // 1..10 through node 1, 11..20 through node 2
			mustExec(t, dbs[node], "INSERT INTO t VALUES (?, 0)", k)
		}
		for i := range dbs {
			if n := syncedCount(t, dbs[i]); n != 20 {
				t.Errorf("node %d: %d rows, want 20", i, n)
			}
		}
	})

	t.Run("Certification", func(t *testing.T) {
		// One after the other: the second commit finds its row changed
		// by a write set already ordered before it.
		tx1 := begin(t, dbs[1], "UPDATE t SET v = v + 1 WHERE k = 1")
		tx2 := begin(t, dbs[2], "UPDATE t SET v = v + 10 WHERE k = 1")
		if err := tx1.Commit(); err != nil {
			t.Fatalf("first commit: %v", err)
		}
		err := tx2.Commit()
		t.Logf("second commit of a conflicting pair: %s", describe(err))
		wantDeadlock(t, err)

		// At once: certification lets exactly one of them through.
		tx1 = begin(t, dbs[1], "UPDATE t SET v = v + 1 WHERE k = 2")
		tx2 = begin(t, dbs[2], "UPDATE t SET v = v + 10 WHERE k = 2")
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for j, tx := range []*sql.Tx{tx1, tx2} {
			wg.Go(func() { errs[j] = tx.Commit() })
		}
		wg.Wait()
		t.Logf("concurrent commits of a conflicting pair: node 1: %s; node 2: %s", describe(errs[0]), describe(errs[1]))
		switch {
		case errs[0] == nil && errs[1] == nil:
			t.Errorf("both conflicting commits succeeded")
		case errs[0] != nil && errs[1] != nil:
			t.Errorf("both conflicting commits failed")
		case errs[0] != nil:
			wantDeadlock(t, errs[0])
		default:
			wantDeadlock(t, errs[1])
		}
		// Read causally: node 0 may not have applied the winner yet.
		var v int
		reader := conn(t, dbs[0], "SET SESSION wsrep_sync_wait = 1")
		if err := reader.QueryRowContext(context.Background(), "SELECT v FROM t WHERE k = 2").Scan(&v); err != nil {
			t.Fatal(err)
		}
		if v != 1 && v != 10 {
			t.Errorf("k=2 has v=%d after one of +1, +10", v)
		}
	})

	t.Run("ForUpdateIsLocal", func(t *testing.T) {
		holder := begin(t, dbs[0], "SELECT v FROM t WHERE k = 3 FOR UPDATE")
		defer holder.Rollback()

		// On its own node the lock holds: a writer waits and times out.
		local := conn(t, dbs[0], "SET SESSION innodb_lock_wait_timeout = 1")
		_, err := local.ExecContext(context.Background(), "UPDATE t SET v = 5 WHERE k = 3")
		t.Logf("writer on the lock holder's node: %s", describe(err))
		if num(err) != 1205 {
			t.Errorf("writer on the lock holder's node: %v, want error 1205", err)
		}

		// On another node nothing waits for it, and the applier aborts
		// the holder to apply the write.
		start := time.Now()
		mustExec(t, dbs[1], "UPDATE t SET v = 7 WHERE k = 3")
		t.Logf("writer on another node committed in %v while the row was locked FOR UPDATE", time.Since(start).Round(time.Microsecond))
		var v int
		err = holder.QueryRow("SELECT v FROM t WHERE k = 3").Scan(&v)
		t.Logf("lock holder's next statement: %s", describe(err))
		if err == nil {
			err = holder.Commit()
			t.Logf("lock holder's commit: %s", describe(err))
		}
		wantDeadlock(t, err)
	})

	t.Run("GetLock", func(t *testing.T) {
		// GET_LOCK works with wsrep on, but a lock is its node's own: a
		// second session on that node is refused it, and one on another
		// node is granted it at the same time.
		getLock := func(c *sql.Conn) int64 {
			var got sql.NullInt64
			err := c.QueryRowContext(context.Background(), "SELECT GET_LOCK('kite_galera_test', 0)").Scan(&got)
			if err != nil {
				t.Fatalf("GET_LOCK: %s", describe(err))
			}
			return got.Int64
		}
		holder, again, other := conn(t, dbs[0]), conn(t, dbs[0]), conn(t, dbs[1])
		first, second, remote := getLock(holder), getLock(again), getLock(other)
		t.Logf("GET_LOCK(name, 0) with wsrep_on: first session on node 0: %d; second on node 0: %d; on node 1 meanwhile: %d", first, second, remote)
		if first != 1 || second != 0 || remote != 1 {
			t.Errorf("GET_LOCK results %d, %d, %d, want 1, 0, 1 (granted, held on this node, granted on another)", first, second, remote)
		}
	})

	t.Run("SyncWait", func(t *testing.T) {
		// A row written through node 1 and at once read on node 2: at
		// wsrep_sync_wait=0 the read may run before node 2 applied the
		// write; at 1 it waits for everything committed before it.
		reader0 := conn(t, dbs[2], "SET SESSION wsrep_sync_wait = 0")
		reader1 := conn(t, dbs[2], "SET SESSION wsrep_sync_wait = 1")
		const rounds = 200
		var stale0, stale1 int
		var took0, took1 time.Duration
		for j := range rounds {
			for _, r := range []struct {
				c     *sql.Conn
				stale *int
				took  *time.Duration
				key   int
			}{{reader0, &stale0, &took0, 1000 + j}, {reader1, &stale1, &took1, 2000 + j}} {
				mustExec(t, dbs[1], "INSERT INTO t VALUES (?, 0)", r.key)
				start := time.Now()
				var n int
				if err := r.c.QueryRowContext(context.Background(), "SELECT COUNT(*) FROM t WHERE k = ?", r.key).Scan(&n); err != nil {
					t.Fatal(err)
				}
				*r.took += time.Since(start)
				if n == 0 {
					*r.stale++
				}
			}
		}
		t.Logf("reads on node 2 right after a commit on node 1, %d each: wsrep_sync_wait=0: %d missed it, %v a read; wsrep_sync_wait=1: %d missed it, %v a read",
			rounds, stale0, (took0 / rounds).Round(time.Microsecond), stale1, (took1 / rounds).Round(time.Microsecond))
		if stale1 != 0 {
			t.Errorf("%d reads at wsrep_sync_wait=1 missed a committed row", stale1)
		}
		mustExec(t, dbs[1], "DELETE FROM t WHERE k >= 1000")
	})

	// Before the kill, which resets node 2's counters.
	for i := range dbs {
		var name, value string
		counters := []string{}
		rows, err := dbs[i].Query("SHOW STATUS WHERE Variable_name IN ('wsrep_local_cert_failures', 'wsrep_local_bf_aborts')")
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			if err := rows.Scan(&name, &value); err != nil {
				t.Fatal(err)
			}
			counters = append(counters, name+"="+value)
		}
		rows.Close()
		t.Logf("node %d: %s", i, strings.Join(counters, " "))
	}

	t.Run("KillAndRejoin", func(t *testing.T) {
		g.Kill(t, 2)
		dbs[2].Close()
		killed := time.Now()
		for k := 21; k <= 30; k++ {
			start := time.Now()
			mustExec(t, dbs[0], "INSERT INTO t VALUES (?, 0)", k)
			if d := time.Since(start); d > 100*time.Millisecond {
				t.Logf("insert %d through node 0, %v after the kill, took %v", k, time.Since(killed).Round(time.Millisecond), d.Round(time.Millisecond))
			}
		}
		size := func() string {
			var name, value string
			if err := dbs[0].QueryRow("SHOW STATUS LIKE 'wsrep_cluster_size'").Scan(&name, &value); err != nil {
				t.Fatal(err)
			}
			return value
		}
		for size() != "2" && time.Since(killed) < 30*time.Second {
			time.Sleep(100 * time.Millisecond)
		}
		t.Logf("node 0 saw a cluster of %s %v after the kill", size(), time.Since(killed).Round(time.Millisecond))

		start := time.Now()
		g.Start(t, 2)
		t.Logf("node 2 restarted and Synced in %v (%s)", time.Since(start).Round(time.Millisecond), transferKind(t, g, 2))
		dbs[2] = galeraDB(top, g, 2)
		if n := syncedCount(t, dbs[2]); n != 30 {
			t.Errorf("node 2 after rejoining: %d rows, want 30", n)
		}
	})
}

// galeraDB is a pool on node i's kite_galera database, closed when t ends.
func galeraDB(t *testing.T, g *Galera, i int) *sql.DB {
	t.Helper()
	cfg, err := gomysql.ParseDSN(g.DSN(i) + "kite_galera")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	db, err := open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// syncedCount counts the rows of t after waiting for the cluster's
// earlier commits to be applied on db's node.
func syncedCount(t *testing.T, db *sql.DB) int {
	t.Helper()
	c := conn(t, db, "SET SESSION wsrep_sync_wait = 1")
	var n int
	if err := c.QueryRowContext(context.Background(), "SELECT COUNT(*) FROM t").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// begin starts a READ COMMITTED transaction, as kite's writers are, and
// runs stmt in it.
func begin(t *testing.T, db *sql.DB, stmt string) *sql.Tx {
	t.Helper()
	tx, err := db.BeginTx(context.Background(), &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(stmt); err != nil {
		tx.Rollback()
		t.Fatalf("%s: %v", stmt, err)
	}
	return tx
}

// conn is a connection of db that runs stmts first, closed when t ends.
// Its session settings must not outlive it in db's pool, so it is closed
// for good rather than handed back.
func conn(t *testing.T, db *sql.DB, stmts ...string) *sql.Conn {
	t.Helper()
	c, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Raw(func(any) error { return driver.ErrBadConn })
		c.Close()
	})
	for _, s := range stmts {
		mustExecConn(t, c, s)
	}
	return c
}

func mustExec(t *testing.T, db *sql.DB, stmt string, args ...any) {
	t.Helper()
	if _, err := db.Exec(stmt, args...); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}

func mustExecConn(t *testing.T, c *sql.Conn, stmt string) {
	t.Helper()
	if _, err := c.ExecContext(context.Background(), stmt); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}

// num is the server's error number of err, 0 if it is not a server error.
func num(err error) uint16 {
	var me *gomysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

func describe(err error) string {
	var me *gomysql.MySQLError
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &me):
		return fmt.Sprintf("error %d (SQLSTATE %s): %s", me.Number, me.SQLState, me.Message)
	}
	return err.Error()
}

func wantDeadlock(t *testing.T, err error) {
	t.Helper()
	if num(err) != 1213 {
		t.Errorf("got %v, want error 1213 (deadlock, from certification or a brute-force abort)", err)
	}
}

// transferKind says from node i's log whether its last join was an
// incremental or a full state transfer. MariaDB logs "SST received" in
// both cases, since the rsync script runs for an IST too; the script's
// own lines tell them apart.
func transferKind(t *testing.T, g *Galera, i int) string {
	t.Helper()
	b, err := os.ReadFile(g.nodes[i].log)
	if err != nil {
		t.Fatal(err)
	}
	log := string(b)
	// Only the lines of the last start.
	if j := strings.LastIndex(log, "Starting MariaDB"); j >= 0 {
		log = log[j:]
	}
	if strings.Contains(log, "rsync SST completed") {
		return "full state transfer"
	}
	if _, rest, ok := strings.Cut(log, "Receiving IST: "); ok {
		line, _, _ := strings.Cut(rest, "\n")
		return "IST of " + line
	}
	return "transfer unknown"
}
