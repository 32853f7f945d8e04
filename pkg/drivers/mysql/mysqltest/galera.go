//go:build unix

package mysqltest

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/kite-db/kite/internal/freeport"
)

// Where Debian's packages put the server and the Galera 4 provider.
const (
	galeraMariadbd = "/usr/sbin/mariadbd"
	galeraProvider = "/usr/lib/galera/libgalera_smm.so"
)

// galeraJoinTimeout bounds a node's start up to Synced: a joiner's
// state transfer (rsync of a small datadir) takes seconds, but the machine
// may be loaded.
const galeraJoinTimeout = 120 * time.Second

// Galera is a MariaDB Galera cluster of local mariadbd processes, one a
// node, each with its own datadir and loopback ports, made by NewGalera
// for one test and removed when it ends.
type Galera struct {
	dir      string
	mariadbd string
	nodes    []*galeraNode
}

type galeraNode struct {
	dir, cnf, log string
	// port is the client port; gmcast, ist and sst are Galera's group
	// communication, incremental and full state transfer ports.
	port, gmcast, ist, sst int
	// position is the last write set the node committed before it was
	// killed, as --wsrep-recover found it; "" if unknown.
	position string
	cmd      *exec.Cmd
	exited   chan struct{} // closed when cmd has been waited for
	waitErr  error         // cmd.Wait's error, once exited is closed
}

// NewGalera starts an n-node Galera cluster on 127.0.0.1 and returns once
// every node is Synced in a cluster of n. The first node bootstraps the
// cluster, then the others join it together, each copying a member's
// data by an rsync state transfer (about 25 s for 3 nodes on a loaded
// 2-core machine). Without mariadbd, mariadb-install-db, rsync
// or the Galera library the test is skipped, except under CI=true, where
// it fails.
func NewGalera(t testing.TB, n int) *Galera {
	t.Helper()
	if n < 1 {
		t.Fatalf("mysqltest: a Galera cluster of %d nodes", n)
	}
	mariadbd, installDB := galeraTools(t)

	// Not t.TempDir: mariadbd and its state transfer scripts run as the
	// mysql user, who must be able to reach the node's directories, and
	// t.TempDir's parent is private to the test's user.
	dir, err := os.MkdirTemp("", "kite-galera-")
	if err != nil {
		t.Fatalf("mysqltest: %v", err)
	}
	g := &Galera{dir: dir, mariadbd: mariadbd}
	t.Cleanup(func() { g.cleanup(t) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatalf("mysqltest: %v", err)
	}

	ports, err := freeport.N(4 * n)
	if err != nil {
		t.Fatalf("mysqltest: %v", err)
	}
	peers := make([]string, n)
	for i := range n {
		nd := &galeraNode{
			dir:    filepath.Join(dir, "node"+strconv.Itoa(i)),
			port:   ports[4*i],
			gmcast: ports[4*i+1],
			ist:    ports[4*i+2],
			sst:    ports[4*i+3],
		}
		nd.cnf = filepath.Join(nd.dir, "my.cnf")
		nd.log = filepath.Join(nd.dir, "error.log")
		g.nodes = append(g.nodes, nd)
		peers[i] = "127.0.0.1:" + strconv.Itoa(nd.gmcast)
	}

	// One datadir is installed and copied to the others, which saves a
	// mariadb-install-db per node; the joiners' copies are replaced by
	// their state transfer anyway.
	first := filepath.Join(g.nodes[0].dir, "data")
	if err := os.MkdirAll(first, 0o755); err != nil {
		t.Fatalf("mysqltest: %v", err)
	}
	install := exec.Command(installDB, "--no-defaults", "--datadir="+first,
		"--auth-root-authentication-method=normal", "--skip-test-db")
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("mysqltest: %s: %v\n%s", installDB, err, tail(out, 30))
	}
	for i, nd := range g.nodes {
		if i > 0 {
			if err := os.MkdirAll(nd.dir, 0o755); err != nil {
				t.Fatalf("mysqltest: %v", err)
			}
			if out, err := exec.Command("cp", "-a", first, nd.dir).CombinedOutput(); err != nil {
				t.Fatalf("mysqltest: copy datadir: %v\n%s", err, out)
			}
		}
		if err := os.WriteFile(nd.cnf, []byte(nd.config(peers)), 0o644); err != nil {
			t.Fatalf("mysqltest: %v", err)
		}
	}
	if os.Geteuid() == 0 {
		// mariadbd refuses to run as root: it switches to mysql (user= in
		// the config), whose files the datadirs must then be.
		if err := chownTree(dir, "mysql"); err != nil {
			t.Fatalf("mysqltest: %v", err)
		}
	}

	began := time.Now()
	g.start(t, 0, true)
	g.waitSynced(t, 0, 1)
	t.Logf("mysqltest: galera node 0 bootstrapped the cluster in %v", time.Since(began).Round(time.Millisecond))
	// The joiners start together: a state transfer is mostly the
	// scripts' waiting, and a joiner whose donor is busy retries.
	began = time.Now()
	for i := 1; i < n; i++ {
		g.start(t, i, false)
	}
	for i := range g.nodes {
		g.waitSynced(t, i, n)
	}
	t.Logf("mysqltest: %d more galera nodes joined in %v", n-1, time.Since(began).Round(time.Millisecond))
	return g
}

// galeraTools finds the programs a cluster needs, or skips (fails under
// CI=true) without them.
func galeraTools(t testing.TB) (mariadbd, installDB string) {
	t.Helper()
	var missing []string
	mariadbd, err := exec.LookPath("mariadbd")
	if err != nil {
		mariadbd = galeraMariadbd
		if _, err := os.Stat(mariadbd); err != nil {
			missing = append(missing, "mariadbd")
		}
	}
	installDB, err = exec.LookPath("mariadb-install-db")
	if err != nil {
		missing = append(missing, "mariadb-install-db")
	}
	// The rsync state transfer runs wsrep_sst_rsync, which runs rsync.
	for _, p := range []string{"rsync", "wsrep_sst_rsync"} {
		if _, err := exec.LookPath(p); err != nil {
			missing = append(missing, p)
		}
	}
	if _, err := os.Stat(galeraProvider); err != nil {
		missing = append(missing, galeraProvider+" (galera-4)")
	}
	if len(missing) > 0 {
		msg := "mysqltest: no Galera cluster: missing " + strings.Join(missing, ", ")
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return mariadbd, installDB
}

// config is the node's whole configuration: mariadbd reads this file only
// (--defaults-file), not the machine's.
func (nd *galeraNode) config(peers []string) string {
	opts := []string{
		"gmcast.listen_addr=tcp://127.0.0.1:" + strconv.Itoa(nd.gmcast),
		"ist.recv_addr=127.0.0.1:" + strconv.Itoa(nd.ist),
		// The default preallocates 128 MiB a node; a test writes little.
		"gcache.size=32M",
		// A killed node is noticed after suspect_timeout (5 s by
		// default), during which the others' commits wait for it.
		"evs.suspect_timeout=PT3S",
		"evs.inactive_timeout=PT5S",
		"evs.install_timeout=PT5S",
	}
	lines := []string{
		"[mysqld]",
		"datadir=" + filepath.Join(nd.dir, "data"),
		"socket=" + filepath.Join(nd.dir, "mysqld.sock"),
		"pid-file=" + filepath.Join(nd.dir, "mysqld.pid"),
		"log-error=" + nd.log,
		"port=" + strconv.Itoa(nd.port),
		"bind-address=127.0.0.1",
		"skip-name-resolve",
		"innodb_buffer_pool_size=64M",
		// What Galera requires: row-based write sets, InnoDB, and
		// interleaved auto-increment locks (the appliers apply in
		// parallel).
		"binlog_format=ROW",
		"default_storage_engine=InnoDB",
		"innodb_autoinc_lock_mode=2",
		"wsrep_on=ON",
		"wsrep_provider=" + galeraProvider,
		"wsrep_cluster_name=kite_test",
		"wsrep_cluster_address=gcomm://" + strings.Join(peers, ","),
		"wsrep_node_name=" + filepath.Base(nd.dir),
		"wsrep_node_address=127.0.0.1",
		"wsrep_node_incoming_address=127.0.0.1:" + strconv.Itoa(nd.port),
		"wsrep_sst_receive_address=127.0.0.1:" + strconv.Itoa(nd.sst),
		// rsync needs neither credentials nor mariabackup, which Debian
		// packages apart.
		"wsrep_sst_method=rsync",
		`wsrep_provider_options="` + strings.Join(opts, ";") + `"`,
	}
	if os.Geteuid() == 0 {
		lines = append(lines, "user=mysql")
	}
	return strings.Join(lines, "\n") + "\n"
}

// start runs node i's mariadbd, bootstrapping a new cluster if newCluster.
func (g *Galera) start(t testing.TB, i int, newCluster bool) {
	t.Helper()
	nd := g.nodes[i]
	args := []string{"--defaults-file=" + nd.cnf}
	if newCluster {
		args = append(args, "--wsrep-new-cluster")
	}
	if nd.position != "" {
		args = append(args, "--wsrep-start-position="+nd.position)
	}
	cmd := exec.Command(g.mariadbd, args...)
	// Its own process group, so that a kill takes the state transfer
	// scripts and their rsync daemons with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Whatever mariadbd writes before it opens log-error.
	out, err := os.OpenFile(filepath.Join(nd.dir, "stdout.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatalf("mysqltest: %v", err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		out.Close()
		t.Fatalf("mysqltest: start node %d: %v", i, err)
	}
	out.Close()
	nd.cmd = cmd
	nd.exited = make(chan struct{})
	go func() {
		nd.waitErr = cmd.Wait()
		close(nd.exited)
	}()
}

// waitSynced waits until node i accepts connections and reports itself
// ready and Synced in a cluster of size nodes.
func (g *Galera) waitSynced(t testing.TB, i, size int) {
	t.Helper()
	nd := g.nodes[i]
	deadline := time.Now().Add(galeraJoinTimeout)
	var last string
	for {
		select {
		case <-nd.exited:
			t.Fatalf("mysqltest: galera node %d exited (%v) before it was Synced; its log ends:\n%s", i, nd.waitErr, nd.logTail(40))
		default:
		}
		status, err := g.status(i)
		if err == nil {
			last = fmt.Sprintf("wsrep_ready=%s wsrep_local_state_comment=%s wsrep_cluster_size=%s",
				status["wsrep_ready"], status["wsrep_local_state_comment"], status["wsrep_cluster_size"])
			if status["wsrep_ready"] == "ON" && status["wsrep_local_state_comment"] == "Synced" &&
				status["wsrep_cluster_size"] == strconv.Itoa(size) {
				return
			}
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			t.Fatalf("mysqltest: galera node %d not Synced in a cluster of %d after %v (last: %s); its log ends:\n%s",
				i, size, galeraJoinTimeout, last, nd.logTail(40))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// status reads node i's wsrep status variables.
func (g *Galera) status(i int) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	db, err := g.open(ctx, i)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, "SHOW GLOBAL STATUS LIKE 'wsrep%'")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	status := map[string]string{}
	for rows.Next() {
		var name, value string
		if err := rows.Scan(&name, &value); err != nil {
			return nil, err
		}
		status[name] = value
	}
	return status, rows.Err()
}

func (g *Galera) open(ctx context.Context, i int) (*sql.DB, error) {
	cfg, err := gomysql.ParseDSN(g.DSN(i))
	if err != nil {
		return nil, err
	}
	cfg.Timeout = 2 * time.Second
	return open(ctx, cfg)
}

// DSN is node i's admin DSN, root@tcp(127.0.0.1:port)/ (go-sql-driver's
// form, no database).
func (g *Galera) DSN(i int) string {
	return "root@tcp(127.0.0.1:" + strconv.Itoa(g.nodes[i].port) + ")/"
}

// Kill kills node i's mariadbd with SIGKILL, as a crash would, and waits
// until it is gone. The other nodes notice only after Galera's suspect
// timeout (3 s here).
func (g *Galera) Kill(t testing.TB, i int) {
	t.Helper()
	nd := g.nodes[i]
	if nd.cmd == nil {
		t.Fatalf("mysqltest: galera node %d is not running", i)
	}
	if err := nd.kill(); err != nil {
		t.Fatalf("mysqltest: kill galera node %d: %v", i, err)
	}
}

// kill SIGKILLs the node's process group and waits for mariadbd.
func (nd *galeraNode) kill() error {
	if nd.cmd == nil {
		return nil
	}
	err := syscall.Kill(-nd.cmd.Process.Pid, syscall.SIGKILL)
	if err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	select {
	case <-nd.exited:
	case <-time.After(30 * time.Second):
		return fmt.Errorf("mariadbd (pid %d) still running 30 s after SIGKILL", nd.cmd.Process.Pid)
	}
	nd.cmd = nil
	return nil
}

// Start restarts node i after Kill. It rejoins the cluster, by an
// incremental state transfer if the others still hold the write sets it
// missed (a full one otherwise); Start returns once it is Synced in a
// cluster of every running node.
func (g *Galera) Start(t testing.TB, i int) {
	t.Helper()
	if g.nodes[i].cmd != nil {
		t.Fatalf("mysqltest: galera node %d is running", i)
	}
	g.recover(t, i)
	t.Logf("mysqltest: galera node %d restarts from position %q", i, g.nodes[i].position)
	g.start(t, i, false)
	running := 0
	for _, nd := range g.nodes {
		if nd.cmd != nil {
			running++
		}
	}
	g.waitSynced(t, i, running)
}

// recover finds the position node i had reached in the cluster's history
// when it was killed. A killed node's grastate.dat says seqno -1, so
// without the position, found in InnoDB by a --wsrep-recover run, the
// node asks for a full state transfer (as mysqld_safe's recovery step
// would otherwise supply it) instead of just the write sets it missed.
func (g *Galera) recover(t testing.TB, i int) {
	t.Helper()
	nd := g.nodes[i]
	nd.position = ""
	log := filepath.Join(nd.dir, "recover.log")
	os.Remove(log)
	cmd := exec.Command(g.mariadbd, "--defaults-file="+nd.cnf, "--wsrep-recover", "--log-error="+log)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("mysqltest: galera node %d: mariadbd --wsrep-recover: %v\n%s", i, err, out)
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatalf("mysqltest: galera node %d: %v", i, err)
	}
	const marker = "WSREP: Recovered position: "
	for _, line := range strings.Split(string(b), "\n") {
		if _, pos, ok := strings.Cut(line, marker); ok {
			pos = strings.TrimSpace(pos)
			if !strings.HasSuffix(pos, ":-1") {
				nd.position = pos
			}
		}
	}
}

// Exec runs statements on node i, on one connection, as root.
func (g *Galera) Exec(t testing.TB, i int, stmts ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db, err := g.open(ctx, i)
	if err != nil {
		t.Fatalf("mysqltest: galera node %d: %v", i, err)
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatalf("mysqltest: galera node %d: %v", i, err)
	}
	defer conn.Close()
	for _, s := range stmts {
		if _, err := conn.ExecContext(ctx, s); err != nil {
			t.Fatalf("mysqltest: galera node %d: %s: %v", i, s, err)
		}
	}
}

// cleanup shows the nodes' logs if the test failed, kills them and removes
// their files.
func (g *Galera) cleanup(t testing.TB) {
	if t.Failed() {
		for i, nd := range g.nodes {
			t.Logf("mysqltest: galera node %d log ends:\n%s", i, nd.logTail(40))
		}
	}
	for i, nd := range g.nodes {
		if err := nd.kill(); err != nil {
			t.Errorf("mysqltest: galera node %d: %v", i, err)
		}
	}
	if err := os.RemoveAll(g.dir); err != nil {
		t.Errorf("mysqltest: %v", err)
	}
}

// logTail is the end of the node's error log, or of what it wrote before
// opening it.
func (nd *galeraNode) logTail(lines int) string {
	var b []byte
	for _, name := range []string{filepath.Join(nd.dir, "stdout.log"), nd.log} {
		if data, err := os.ReadFile(name); err == nil {
			b = append(b, data...)
		}
	}
	return string(tail(b, lines))
}

// tail is the last n lines of b.
func tail(b []byte, n int) []byte {
	b = bytes.TrimRight(b, "\n")
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == '\n' {
			n--
			if n == 0 {
				return b[i+1:]
			}
		}
	}
	return b
}

// chownTree gives everything under dir to the named user.
func chownTree(dir, name string) error {
	u, err := user.Lookup(name)
	if err != nil {
		return fmt.Errorf("chown %s: %w", dir, err)
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return fmt.Errorf("chown %s: user %s: %w", dir, name, err)
	}
	gid, err := strconv.Atoi(u.Gid)
	if err != nil {
		return fmt.Errorf("chown %s: user %s: %w", dir, name, err)
	}
	return filepath.Walk(dir, func(path string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if err := os.Lchown(path, uid, gid); err != nil {
			return fmt.Errorf("chown %s: %w", path, err)
		}
		return nil
	})
}
