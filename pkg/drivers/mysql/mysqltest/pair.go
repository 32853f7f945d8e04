//go:build unix

package mysqltest

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"
)

// Pair is a primary and an asynchronous replica of it (MariaDB's binlog
// replication with GTIDs), both private servers (NewServer): what a
// MySQL deployment fails over to when its primary dies. Databases created
// on the primary are replicated.
type Pair struct {
	primary, replica *Server
}

// NewPair starts both servers and replication between them, returning
// once the replica runs. They have server_id 1 and 2 (replication refuses
// one server_id on both sides).
func NewPair(t testing.TB) *Pair {
	t.Helper()
	binlog := []string{"log_bin=mariadb-bin", "binlog_format=ROW"}
	p := &Pair{
		primary: newServer(t, "", append([]string{"server_id=1"}, binlog...)...),
		replica: newServer(t, "", append([]string{"server_id=2", "log_slave_updates=ON"}, binlog...)...),
	}
	p.replica.Exec(t,
		fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%d, MASTER_USER='root', MASTER_PASSWORD='', MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1",
			p.primary.p.port),
		"START SLAVE")
	p.WaitCaughtUp(t)
	return p
}

// Primary is the server replicated from (until Promote kills it).
func (p *Pair) Primary() *Server { return p.primary }

// Replica is the server replicating (and after Promote, the primary).
func (p *Pair) Replica() *Server { return p.replica }

// WaitCaughtUp waits until the replica has applied every transaction the
// primary had committed when it was called.
func (p *Pair) WaitCaughtUp(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), serverStartTimeout)
	defer cancel()
	var pos string
	if err := p.primary.queryRow(ctx, "SELECT @@gtid_binlog_pos", &pos); err != nil {
		t.Fatalf("mysqltest: the primary's binlog position: %v", err)
	}
	var waited int
	// MASTER_GTID_WAIT: 0 once the position is applied, -1 on timeout.
	q := fmt.Sprintf("SELECT MASTER_GTID_WAIT('%s', %d)", pos, int(serverStartTimeout/time.Second))
	if err := p.replica.queryRow(ctx, q, &waited); err != nil || waited != 0 {
		t.Fatalf("mysqltest: replica not caught up with %q (%d, %v); its log ends:\n%s", pos, waited, err, p.replica.LogTail(20))
	}
}

// PauseReplication stops the replica's replication: what the primary
// commits from then on, and acknowledges, the replica never gets.
func (p *Pair) PauseReplication(t testing.TB) {
	t.Helper()
	p.replica.Exec(t, "STOP SLAVE")
}

// Promote fails over: the primary dies (SIGKILL) and the replica stops
// replicating and becomes a primary of its own, with what it had.
func (p *Pair) Promote(t testing.TB) {
	t.Helper()
	p.primary.Stop(t, syscall.SIGKILL)
	p.replica.Exec(t, "STOP SLAVE", "RESET SLAVE ALL")
}

// queryRow runs a one-row query as root.
func (s *Server) queryRow(ctx context.Context, query string, dest ...any) error {
	db, err := s.p.open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	return db.QueryRowContext(ctx, query).Scan(dest...)
}
