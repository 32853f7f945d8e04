package pgtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/kite-db/kite/internal/freeport"
)

// DefaultBinDir holds the PostgreSQL server binaries (initdb, pg_ctl,
// pg_basebackup) unless KITE_TEST_POSTGRES_BIN names another directory.
const DefaultBinDir = "/usr/lib/postgresql/15/bin"

// Cluster is a Postgres server this test started, on a loopback port.
type Cluster struct {
	Dir  string
	Port int
	bin  string
}

// DSN is a connection string to the cluster's postgres database.
func (c *Cluster) DSN() string {
	return fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=postgres sslmode=disable connect_timeout=2", c.Port)
}

// URL is DSN in URL form, as kite's --datastore-endpoint takes it.
func (c *Cluster) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2", c.Port)
}

// Pair is a primary and a streaming-replication standby made from it.
type Pair struct {
	Primary, Standby *Cluster
}

// DSN is the multi-host connection string kite servers use: whichever of
// the two accepts writes.
func (p *Pair) DSN() string {
	return fmt.Sprintf("host=127.0.0.1,127.0.0.1 port=%d,%d user=postgres dbname=postgres sslmode=disable "+
		"connect_timeout=2 target_session_attrs=read-write", p.Primary.Port, p.Standby.Port)
}

// URL is DSN in URL form, as kite's --datastore-endpoint takes it.
func (p *Pair) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2&target_session_attrs=read-write",
		p.Primary.Port, p.Standby.Port)
}

// NewPair initialises a primary cluster (wal_level=replica, trust
// authentication for loopback connections and replication) in a temporary
// directory, makes a standby of it with pg_basebackup -R, and starts both.
// With synchronous the primary then waits for the standby to flush every
// commit (synchronous_standby_names='*', set after the base backup so the
// standby, once promoted, does not wait for a standby of its own). Both
// are stopped and removed when t ends. Without the binaries the test is
// skipped, except under CI=true, where it fails.
func NewPair(t testing.TB, synchronous bool) *Pair {
	t.Helper()
	bin, dir := serverDir(t, "kite-pgpair-")
	p := &Pair{
		Primary: &Cluster{Dir: filepath.Join(dir, "primary"), Port: freePort(t), bin: bin},
		Standby: &Cluster{Dir: filepath.Join(dir, "standby"), Port: freePort(t), bin: bin},
	}
	c := p.Primary
	c.run(t, "initdb", "-D", c.Dir, "-U", "postgres", "-A", "trust", "--no-sync", "--no-instructions")
	c.configure(t, "wal_level = replica", "max_wal_senders = 5", "hot_standby = on")
	c.Start(t)
	t.Cleanup(func() { c.Stop(t, "immediate") })
	s := p.Standby
	c.run(t, "pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(c.Port), "-U", "postgres",
		"-D", s.Dir, "-R", "-X", "stream", "--no-sync")
	s.configure(t)
	s.Start(t)
	t.Cleanup(func() { s.Stop(t, "immediate") })
	if synchronous {
		c.Exec(t, `ALTER SYSTEM SET synchronous_standby_names = '*'`)
		c.Exec(t, `SELECT pg_reload_conf()`)
	}
	want := "async"
	if synchronous {
		want = "sync"
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var state string
		err := c.QueryRow(t, `SELECT coalesce(max(sync_state), '') FROM pg_stat_replication`, &state)
		if err == nil && state == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pgtest: standby not streaming (%s) within 30s: state %q, err %v", want, state, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return p
}

// serverDir finds the server binaries and makes the directory the
// clusters of one test live in, removed when t ends. Without the binaries
// the test is skipped, except under CI=true, where it fails.
func serverDir(t testing.TB, prefix string) (bin, dir string) {
	t.Helper()
	bin = serverBin(t)
	// Not t.TempDir: Postgres refuses to run as root, and the postgres
	// user must be able to reach its directory.
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	chownToPostgres(t, dir)
	return bin, dir
}

// serverBin finds the server binaries. Without them the test is skipped,
// except under CI=true, where it fails.
func serverBin(t testing.TB) string {
	t.Helper()
	bin := os.Getenv("KITE_TEST_POSTGRES_BIN")
	if bin == "" {
		bin = DefaultBinDir
	}
	for _, tool := range []string{"initdb", "pg_ctl", "pg_basebackup"} {
		if _, err := os.Stat(filepath.Join(bin, tool)); err != nil {
			msg := fmt.Sprintf("pgtest: PostgreSQL binaries missing in %s (set KITE_TEST_POSTGRES_BIN): %v", bin, err)
			if os.Getenv("CI") == "true" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
	return bin
}

// configure appends settings to postgresql.conf: the cluster's port and
// socket directory, and whatever else is given. fsync is off: these
// clusters need not survive a crash of the machine, and the tests crash
// Postgres, not the kernel.
func (c *Cluster) configure(t testing.TB, extra ...string) {
	t.Helper()
	conf := fmt.Sprintf("port = %d\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '%s'\n"+
		"fsync = off\nshared_buffers = 16MB\nmax_connections = 60\n", c.Port, filepath.Dir(c.Dir))
	for _, e := range extra {
		conf += e + "\n"
	}
	f, err := os.OpenFile(filepath.Join(c.Dir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	defer f.Close()
	if _, err := f.WriteString(conf); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
}

// Start starts the cluster and waits until it accepts connections.
func (c *Cluster) Start(t testing.TB) {
	t.Helper()
	c.run(t, "pg_ctl", "-D", c.Dir, "-l", c.Dir+".log", "-w", "-t", "30", "start")
}

// Stop stops the cluster with mode (fast, immediate); a cluster that is
// not running is left alone.
func (c *Cluster) Stop(t testing.TB, mode string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(c.Dir, "postmaster.pid")); err != nil {
		return
	}
	c.run(t, "pg_ctl", "-D", c.Dir, "-m", mode, "-w", "-t", "30", "stop")
}

// Running reports whether the cluster's postmaster runs (pg_ctl status).
// A server that could not write its WAL, for one, stops on its own.
func (c *Cluster) Running(t testing.TB) bool {
	t.Helper()
	path := filepath.Join(c.bin, "pg_ctl")
	cmd := exec.Command(path, "-D", c.Dir, "status")
	if os.Geteuid() == 0 {
		cmd = exec.Command("runuser", "-u", "postgres", "--", path, "-D", c.Dir, "status")
	}
	return cmd.Run() == nil
}

// Promote ends a standby's recovery and waits until it accepts writes.
func (c *Cluster) Promote(t testing.TB) {
	t.Helper()
	c.run(t, "pg_ctl", "-D", c.Dir, "-w", "-t", "30", "promote")
}

// Exec runs one statement on the cluster's postgres database.
func (c *Cluster) Exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.DSN())
	if err != nil {
		t.Fatalf("pgtest: connect to port %d: %v", c.Port, err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("pgtest: %s: %v", sql, err)
	}
}

// QueryRow reads one row from the cluster into dest.
func (c *Cluster) QueryRow(t testing.TB, sql string, dest ...any) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.DSN())
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return conn.QueryRow(ctx, sql).Scan(dest...)
}

// run runs one of the server binaries, as the postgres user when the test
// runs as root (Postgres refuses to run as root).
func (c *Cluster) run(t testing.TB, tool string, args ...string) {
	t.Helper()
	path := filepath.Join(c.bin, tool)
	cmd := exec.Command(path, args...)
	if os.Geteuid() == 0 {
		cmd = exec.Command("runuser", append([]string{"-u", "postgres", "--", path}, args...)...)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("pgtest: %s %v: %v\n%s", tool, args, err, out)
	}
}

// chownToPostgres gives dir to the postgres user when the test runs as
// root.
func chownToPostgres(t testing.TB, dir string) {
	t.Helper()
	if os.Geteuid() != 0 {
		return
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		t.Fatalf("pgtest: running as root needs a postgres user to run Postgres as: %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
}

// freePort returns a loopback port that was free a moment ago, below the
// ephemeral range: the clusters are stopped and started again on theirs.
func freePort(t testing.TB) int {
	t.Helper()
	port, err := freeport.One()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return port
}
