//go:build unix

package mysqltest

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kite-db/kite/internal/freeport"
)

// serverStartTimeout bounds a start up to accepting connections,
// InnoDB's crash recovery after a SIGKILL included.
const serverStartTimeout = 60 * time.Second

// smallFootprint keeps a fresh server's datadir to about 30 MiB, so that
// it fits a small filesystem a test fills up: InnoDB's defaults
// preallocate a 96 MiB redo log and 12 MiB system and temporary
// tablespaces, and grow the system tablespace 64 MiB at a time (the
// install alone takes it to 68 MiB). They apply when the datadir is
// installed as well, which creates those files.
var smallFootprint = []string{
	"innodb_buffer_pool_size=32M",
	"innodb_log_file_size=8M",
	"innodb_data_file_path=ibdata1:4M:autoextend",
	"innodb_autoextend_increment=1",
	"innodb_temp_data_file_path=ibtmp1:4M:autoextend",
	"innodb_undo_tablespaces=0",
}

// Server is a single MariaDB server (no Galera) of a test's own on a
// loopback port, which the test may stop and restart, SIGKILL, or put on a
// disk it fills, without touching the server other tests share.
type Server struct {
	p *mariadbdProc
}

// NewServer installs a fresh datadir and starts mariadbd on 127.0.0.1,
// returning once it accepts connections (about 3 s). The datadir is made
// in dataParent when it is not "" (a small filesystem to fill, say);
// the config, logs and socket are always in a directory of their own, so
// that a full data disk still leaves mariadbd its error log. Without
// mariadbd or mariadb-install-db the test is skipped, except under
// CI=true, where it fails.
func NewServer(t testing.TB, dataParent string) *Server {
	t.Helper()
	return newServer(t, dataParent)
}

// newServer is NewServer with extra lines for its config (a replication
// pair's server_id and binary log).
func newServer(t testing.TB, dataParent string, extra ...string) *Server {
	t.Helper()
	mariadbd, installDB, missing := mariadbTools()
	if len(missing) > 0 {
		skipOrFail(t, "mysqltest: no private MariaDB server: missing "+strings.Join(missing, ", "))
	}
	dir, err := sharedDir("kite-mariadb-")
	if err != nil {
		t.Fatalf("mysqltest: %v", err)
	}
	data := filepath.Join(dir, "data")
	if dataParent != "" {
		data = filepath.Join(dataParent, "mariadb")
	}
	ports, err := freeport.N(1)
	if err != nil {
		t.Fatalf("mysqltest: %v", err)
	}
	s := &Server{p: newMariadbdProc(mariadbd, dir, data, ports[0])}
	t.Cleanup(func() { s.cleanup(t) })

	args := make([]string, len(smallFootprint))
	for i, o := range smallFootprint {
		args[i] = "--" + o
	}
	installDatadir(t, installDB, data, args...)
	if err := s.p.writeConfig(append(slices.Clone(smallFootprint), extra...)...); err != nil {
		t.Fatalf("mysqltest: %v", err)
	}
	if os.Geteuid() == 0 {
		// mariadbd runs as mysql (mariadbdProc.config).
		for _, d := range []string{dir, data} {
			if err := chownTree(d, "mysql"); err != nil {
				t.Fatalf("mysqltest: %v", err)
			}
		}
	}
	began := time.Now()
	s.Start(t)
	t.Logf("mysqltest: private mariadbd on port %d started in %v", s.p.port, time.Since(began).Round(time.Millisecond))
	return s
}

// DSN is kite's DSN for database db as root, who has no password:
// mysql://root@tcp(127.0.0.1:port)/db.
func (s *Server) DSN(db string) string { return "mysql://" + s.p.adminDSN() + db }

// Addr is the server's host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.p.port) }

// Start starts mariadbd, stopped or crashed, and waits until it accepts
// connections.
func (s *Server) Start(t testing.TB) {
	t.Helper()
	if s.p.running() {
		t.Fatalf("mysqltest: private mariadbd is running")
	}
	if err := s.p.start(); err != nil {
		t.Fatalf("mysqltest: %v", err)
	}
	deadline := time.Now().Add(serverStartTimeout)
	for {
		select {
		case <-s.p.exited:
			t.Fatalf("mysqltest: private mariadbd exited (%v) before it accepted connections; its log ends:\n%s", s.p.waitErr, s.p.logTail(40))
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		db, err := s.p.open(ctx)
		cancel()
		if err == nil {
			db.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("mysqltest: private mariadbd not accepting connections after %v (%v); its log ends:\n%s", serverStartTimeout, err, s.p.logTail(40))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Stop stops mariadbd with sig and waits until it has exited: SIGTERM is
// an orderly shutdown (what mysqladmin shutdown and a service restart do:
// the server ends its sessions, flushes and exits), SIGKILL a crash
// (connections drop mid-statement and the next start runs InnoDB's crash
// recovery).
func (s *Server) Stop(t testing.TB, sig syscall.Signal) {
	t.Helper()
	if err := s.p.stop(sig, serverStartTimeout); err != nil {
		t.Fatalf("mysqltest: stop private mariadbd: %v", err)
	}
}

// Restart is Stop(sig) then Start.
func (s *Server) Restart(t testing.TB, sig syscall.Signal) {
	t.Helper()
	s.Stop(t, sig)
	s.Start(t)
}

// Running reports whether mariadbd runs: it exits by itself on some
// failures, a full disk among them.
func (s *Server) Running() bool { return s.p.running() }

// Exec runs statements as root, on one connection.
func (s *Server) Exec(t testing.TB, stmts ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := s.p.exec(ctx, stmts...); err != nil {
		t.Fatalf("mysqltest: private mariadbd: %v", err)
	}
}

// LogTail is the end of mariadbd's error log.
func (s *Server) LogTail(lines int) string { return s.p.logTail(lines) }

// cleanup shows the log if the test failed, kills mariadbd and removes
// its files.
func (s *Server) cleanup(t testing.TB) {
	if t.Failed() {
		t.Logf("mysqltest: private mariadbd log ends:\n%s", s.p.logTail(40))
	}
	if err := s.p.kill(); err != nil {
		t.Errorf("mysqltest: private mariadbd: %v", err)
	}
	for _, d := range []string{s.p.data, s.p.dir} {
		if err := os.RemoveAll(d); err != nil {
			t.Errorf("mysqltest: %v", err)
		}
	}
}
