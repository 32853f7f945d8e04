//go:build unix

package mysqltest

import (
	"context"
	"testing"
)

// TestPair: what the primary commits reaches the replica; after a pause
// and a promotion the replica is writable and lacks what came after the
// pause.
func TestPair(t *testing.T) {
	p := NewPair(t)
	p.primary.Exec(t, "CREATE DATABASE pairtest", "CREATE TABLE pairtest.t (n INT PRIMARY KEY)", "INSERT INTO pairtest.t VALUES (1), (2)")
	p.WaitCaughtUp(t)
	count := func(s *Server) int {
		var n int
		if err := s.queryRow(context.Background(), "SELECT count(*) FROM pairtest.t", &n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(p.replica); n != 2 {
		t.Fatalf("the replica has %d rows, want 2", n)
	}
	p.PauseReplication(t)
	p.primary.Exec(t, "INSERT INTO pairtest.t VALUES (3)")
	if n := count(p.primary); n != 3 {
		t.Fatalf("the primary has %d rows, want 3", n)
	}
	p.Promote(t)
	if p.primary.Running() {
		t.Fatal("the primary runs after Promote")
	}
	p.replica.Exec(t, "INSERT INTO pairtest.t VALUES (4)")
	if n := count(p.replica); n != 3 {
		t.Fatalf("the promoted replica has %d rows, want 3 (1, 2 and its own 4)", n)
	}
	var ids [2]int
	if err := p.replica.queryRow(context.Background(), "SELECT @@server_id, (SELECT count(*) FROM pairtest.t WHERE n = 3)", &ids[0], &ids[1]); err != nil || ids[0] != 2 || ids[1] != 0 {
		t.Fatalf("the promoted replica: server_id %d, row 3 present %d (%v); want 2 and 0", ids[0], ids[1], err)
	}
}
