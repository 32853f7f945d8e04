//go:build unix

package mysqltest

import (
	"context"
	"os"
	"syscall"
	"testing"
)

// TestServer: a private server starts, keeps a committed row across an
// orderly restart and a crash, and accepts connections after each.
func TestServer(t *testing.T) {
	// A datadir elsewhere, as a test that fills a disk puts it. Not
	// t.TempDir, which the mysql user may not enter.
	parent, err := sharedDir("kite-mariadb-parent-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(parent) })
	s := NewServer(t, parent)
	s.Exec(t, "CREATE DATABASE k", "CREATE TABLE k.t (v INT PRIMARY KEY) ENGINE=InnoDB", "INSERT INTO k.t VALUES (1)")
	for i, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		s.Restart(t, sig)
		if !s.Running() {
			t.Fatalf("not running after a restart by %v", sig)
		}
		s.Exec(t, "INSERT INTO k.t SELECT v + 1 FROM k.t WHERE v = "+string(rune('1'+i)))
	}
	db, err := s.p.open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM k.t").Scan(&n); err != nil || n != 3 {
		t.Fatalf("%d rows (%v), want the 3 committed across the restarts", n, err)
	}
}
