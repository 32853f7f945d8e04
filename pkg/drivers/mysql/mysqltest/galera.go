//go:build unix

package mysqltest

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kite-db/kite/internal/freeport"
)

// Where Debian's galera-4 package puts the Galera 4 provider.
const galeraProvider = "/usr/lib/galera/libgalera_smm.so"

// galeraJoinTimeout bounds a node's start up to Synced: a joiner's
// state transfer (rsync of a small datadir) takes seconds, but the machine
// may be loaded.
const galeraJoinTimeout = 120 * time.Second

// Galera is a MariaDB Galera cluster of local mariadbd processes, one a
// node, each with its own datadir and loopback ports, made by NewGalera
// for one test and removed when it ends.
type Galera struct {
	dir   string
	nodes []*galeraNode
}

type galeraNode struct {
	*mariadbdProc
	// gmcast, ist and sst are Galera's group communication, incremental
	// and full state transfer ports.
	gmcast, ist, sst int
	// position is the last write set the node committed before it was
	// killed, as --wsrep-recover found it; "" if unknown.
	position string
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

	dir, err := sharedDir("kite-galera-")
	if err != nil {
		t.Fatalf("mysqltest: %v", err)
	}
	g := &Galera{dir: dir}
	t.Cleanup(func() { g.cleanup(t) })

	ports, err := freeport.N(4 * n)
	if err != nil {
		t.Fatalf("mysqltest: %v", err)
	}
	peers := make([]string, n)
	for i := range n {
		ndir := filepath.Join(dir, "node"+strconv.Itoa(i))
		nd := &galeraNode{
			mariadbdProc: newMariadbdProc(mariadbd, ndir, filepath.Join(ndir, "data"), ports[4*i]),
			gmcast:       ports[4*i+1],
			ist:          ports[4*i+2],
			sst:          ports[4*i+3],
		}
		g.nodes = append(g.nodes, nd)
		peers[i] = "127.0.0.1:" + strconv.Itoa(nd.gmcast)
	}

	// One datadir is installed and copied to the others, which saves a
	// mariadb-install-db per node; the joiners' copies are replaced by
	// their state transfer anyway.
	first := g.nodes[0].data
	installDatadir(t, installDB, first)
	for i, nd := range g.nodes {
		if i > 0 {
			if err := os.MkdirAll(nd.dir, 0o755); err != nil {
				t.Fatalf("mysqltest: %v", err)
			}
			if out, err := exec.Command("cp", "-a", first, nd.dir).CombinedOutput(); err != nil {
				t.Fatalf("mysqltest: copy datadir: %v\n%s", err, out)
			}
		}
		if err := nd.writeConfig(nd.galeraConfig(peers)...); err != nil {
			t.Fatalf("mysqltest: %v", err)
		}
	}
	if os.Geteuid() == 0 {
		// mariadbd runs as mysql (mariadbdProc.config).
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
	// The rsync state transfer runs wsrep_sst_rsync, which runs rsync.
	mariadbd, installDB, missing := mariadbTools("rsync", "wsrep_sst_rsync")
	if _, err := os.Stat(galeraProvider); err != nil {
		missing = append(missing, galeraProvider+" (galera-4)")
	}
	if len(missing) > 0 {
		skipOrFail(t, "mysqltest: no Galera cluster: missing "+strings.Join(missing, ", "))
	}
	return mariadbd, installDB
}

// galeraConfig is what a node's configuration adds to mariadbdProc.config.
func (nd *galeraNode) galeraConfig(peers []string) []string {
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
	return []string{
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
}

// start runs node i's mariadbd, bootstrapping a new cluster if newCluster.
func (g *Galera) start(t testing.TB, i int, newCluster bool) {
	t.Helper()
	nd := g.nodes[i]
	var args []string
	if newCluster {
		args = append(args, "--wsrep-new-cluster")
	}
	if nd.position != "" {
		args = append(args, "--wsrep-start-position="+nd.position)
	}
	if err := nd.start(args...); err != nil {
		t.Fatalf("mysqltest: start node %d: %v", i, err)
	}
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

func (g *Galera) open(ctx context.Context, i int) (*sql.DB, error) { return g.nodes[i].open(ctx) }

// DSN is node i's admin DSN, root@tcp(127.0.0.1:port)/ (go-sql-driver's
// form, no database).
func (g *Galera) DSN(i int) string { return g.nodes[i].adminDSN() }

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
	cmd := exec.Command(nd.mariadbd, "--defaults-file="+nd.cnf, "--wsrep-recover", "--log-error="+log)
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
	if err := g.nodes[i].exec(ctx, stmts...); err != nil {
		t.Fatalf("mysqltest: galera node %d: %v", i, err)
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
