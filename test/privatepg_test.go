package test

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// privatePostgres is a PostgreSQL server of the test's own, so that a test
// can restart or stop it without touching the Postgres other tests share.
type privatePostgres struct {
	t    testing.TB
	bin  string // directory of initdb, pg_ctl
	dir  string
	port int
	cred *syscall.Credential // postgres refuses to run as root
}

// startPrivatePostgres initialises and starts a throwaway cluster on a free
// loopback port. It needs the server binaries (Debian's postgresql package);
// without them the test is skipped outside CI and fails under CI=true.
func startPrivatePostgres(t testing.TB) *privatePostgres {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	if len(bins) == 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("PostgreSQL server binaries not found (/usr/lib/postgresql/*/bin); .ci/run installs them")
		}
		t.Skip("PostgreSQL server binaries not found (/usr/lib/postgresql/*/bin): install postgresql to run this test")
	}
	p := &privatePostgres{t: t, bin: filepath.Dir(bins[len(bins)-1]), port: freePort(t)}
	dir, err := os.MkdirTemp("", "kite-pg-")
	if err != nil {
		t.Fatal(err)
	}
	p.dir = dir
	t.Cleanup(func() {
		p.ctl("stop", "-m", "immediate")
		os.RemoveAll(dir)
	})
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root and no postgres user to run the server as: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		p.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := p.run("initdb", "-D", p.data(), "-A", "trust", "-U", "postgres", "--no-sync"); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	if out, err := p.ctl("start"); err != nil {
		t.Fatalf("start private postgres: %v\n%s\nserver log:\n%s", err, out, p.Log())
	}
	return p
}

func (p *privatePostgres) data() string { return filepath.Join(p.dir, "data") }

// DSN returns the connection string of database db.
func (p *privatePostgres) DSN(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", p.port, db)
}

func (p *privatePostgres) run(name string, args ...string) ([]byte, error) {
	cmd := exec.Command(filepath.Join(p.bin, name), args...)
	cmd.Dir = p.dir
	if p.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	}
	return cmd.CombinedOutput()
}

// ctl runs pg_ctl: "start", "stop", "restart" with extra arguments.
func (p *privatePostgres) ctl(action string, args ...string) ([]byte, error) {
	opts := fmt.Sprintf("-p %d -c listen_addresses=127.0.0.1 -k %s -c fsync=on", p.port, p.dir)
	all := append([]string{action, "-D", p.data(), "-w", "-t", "60", "-l", filepath.Join(p.dir, "log"), "-o", opts}, args...)
	if action == "stop" {
		all = append([]string{action, "-D", p.data(), "-w", "-t", "60"}, args...)
	}
	return p.run("pg_ctl", all...)
}

// Restart stops the server (fast: sessions are cut, as a failover or a
// maintenance restart cuts them) and starts it again.
func (p *privatePostgres) Restart() {
	p.t.Helper()
	if out, err := p.ctl("restart", "-m", "fast"); err != nil {
		p.t.Fatalf("restart private postgres: %v\n%s\nserver log:\n%s", err, out, p.Log())
	}
}

// Log returns the server's log.
func (p *privatePostgres) Log() string {
	b, _ := os.ReadFile(filepath.Join(p.dir, "log"))
	return strings.TrimSpace(string(b))
}
