// Package test holds kite's end-to-end tests: kite runs as a real child
// process and is compared, request by request, with a reference etcd 3.7
// embedded in the test process.
//
// KITE_TEST_DATASTORE=postgres runs every kite these tests start on a fresh
// Postgres database (pkg/drivers/postgres/pgtest says where Postgres is
// found) instead of its default embedded SQLite, KITE_TEST_DATASTORE=mysql
// on a fresh MySQL or MariaDB database (pkg/drivers/mysql/mysqltest);
// KITE_TEST_DATASTORE=raftsql
// makes every kite one member of a fresh 3-member raftsql cluster, and
// raftsql-restored the same with every member's data dir made by `kite
// snapshot restore` from an empty kite's snapshot.
//
// Debugging aid: KITE_TEST_AGAINST_ETCD=1 replaces the kite process with a
// second embedded etcd, which proves the tests themselves on etcd-vs-etcd.
// In that mode only the "--flag=value" spelling of extra flags is understood.
package test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/kite-db/kite/internal/testenv"
	"github.com/kite-db/kite/pkg/drivers/mysql/mysqltest"
	"github.com/kite-db/kite/pkg/drivers/postgres/pgtest"
	"github.com/kite-db/kite/pkg/drivers/sqlite"
	"github.com/kite-db/kite/pkg/mvcc"
)

var (
	// kiteBin and etcdctlBin are built once per test process by TestMain.
	kiteBin, etcdctlBin     string
	kiteBuildErr, ctlBuildE error
	againstEtcd             = os.Getenv("KITE_TEST_AGAINST_ETCD") == "1"
	// datastore is the storage of the kites the tests start: "sqlite",
	// "postgres", "mysql" or "raftsql" (each kite a member of a 3-member
	// cluster).
	datastore = envOr("KITE_TEST_DATASTORE", "sqlite")
)

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// freshStorageFlags returns the flags that give a new kite empty storage of
// the kind under test.
func freshStorageFlags(t testing.TB) []string {
	t.Helper()
	switch datastore {
	case "sqlite":
		return nil
	case "postgres":
		return []string{"--datastore-endpoint", pgtest.NewDatabase(t)}
	case "mysql":
		return []string{"--datastore-endpoint", mysqltest.NewDatabase(t)}
	case "raftsql", "raftsql-restored":
		return raftPeers(t)
	}
	t.Fatalf("KITE_TEST_DATASTORE=%q: want sqlite, postgres, mysql, raftsql or raftsql-restored", datastore)
	return nil
}

// raftPeers starts the two other members of a new 3-member raftsql cluster
// and returns the flags that make the kite under test its third member
// (named "t", as every test kite). The test talks to that member only:
// every suite then runs against a cluster, the member under test being a
// follower or the leader as the election falls, and a test that kills it
// leaves a quorum that keeps the cluster going.
func raftPeers(t testing.TB) []string {
	t.Helper()
	if kiteBuildErr != nil {
		t.Fatalf("kite binary: %v", kiteBuildErr)
	}
	names := []string{"t", "p1", "p2"}
	// Every port of the cluster must differ: a peer port per member and a
	// client port per other member (the kite under test picks its own).
	ports := freePorts(t, 2*len(names)-1)
	port := func() int {
		p := ports[0]
		ports = ports[1:]
		return p
	}
	peers := make([]string, len(names))
	var cluster []string
	for i, name := range names {
		peers[i] = "http://127.0.0.1:" + strconv.Itoa(port())
		cluster = append(cluster, name+"="+peers[i])
	}
	common := []string{"--initial-cluster", strings.Join(cluster, ","), "--initial-cluster-state", "new",
		"--initial-cluster-token", fmt.Sprintf("kite-test-%d", time.Now().UnixNano())}
	dirs := make([]string, len(names))
	for i := range names {
		dirs[i] = t.TempDir()
	}
	restored := datastore == "raftsql-restored"
	if restored {
		// Every member's data dir made by `kite snapshot restore` from a
		// snapshot of an empty kite, as etcdutl restores a cluster: the
		// suites then run on a cluster that began from a restore.
		snap := emptySnapshot(t)
		for i, name := range names {
			args := append([]string{"snapshot", "restore", "--data-dir", dirs[i], "--name", name,
				"--initial-advertise-peer-urls", peers[i]}, common...)
			args = slices.DeleteFunc(args, func(a string) bool { return a == "--initial-cluster-state" || a == "new" })
			if out, err := exec.Command(kiteBin, append(args, snap)...).CombinedOutput(); err != nil {
				t.Fatalf("kite %v: %v\n%s", args, err, out)
			}
		}
	}
	for i := 1; i < len(names); i++ {
		ep := "http://127.0.0.1:" + strconv.Itoa(port())
		log := &syncBuffer{}
		p, err := testenv.Start(testenv.Command{Argv: append([]string{kiteBin, "--name", names[i], "--data-dir", dirs[i],
			"--listen-client-urls", ep, "--advertise-client-urls", ep, "--log-level", "warn",
			"--listen-peer-urls", peers[i], "--initial-advertise-peer-urls", peers[i]}, common...), Out: log})
		if err != nil {
			t.Fatalf("start raft peer %s: %v", names[i], err)
		}
		t.Cleanup(func() {
			p.Kill()
			if t.Failed() {
				t.Logf("raft peer %s log (tail):\n%s", names[i], log.Tail(4096))
			}
		})
	}
	flags := append([]string{"--listen-peer-urls", peers[0], "--initial-advertise-peer-urls", peers[0]}, common...)
	if restored {
		flags = append(flags, "--data-dir", dirs[0]) // the last --data-dir wins
	}
	return flags
}

// emptySnapshot writes the database of a kite that holds nothing yet
// (revision 1, as a new etcd) and returns its path.
func emptySnapshot(t testing.TB) string {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "empty.db")
	b, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := mvcc.Open(ctx, b, mvcc.Config{})
	if err == nil {
		err = s.Close()
	}
	if cerr := b.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("empty kite database: %v", err)
	}
	return path
}

// freePort returns a loopback port that was free a moment ago
// (testenv.FreePort says why it is not one from bind(:0)).
func freePort(t testing.TB) int {
	t.Helper()
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// freePorts returns n distinct loopback ports that were free a moment ago
// (testenv.FreePorts).
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	ports, err := testenv.FreePorts(n)
	if err != nil {
		t.Fatal(err)
	}
	return ports
}

// server is one etcd-compatible endpoint with its clients.
type server struct {
	name     string // "etcd" or "kite"
	Endpoint string
	Client   *clientv3.Client
	KV       pb.KVClient
	Lease    pb.LeaseClient
	Watch    pb.WatchClient
	Maint    pb.MaintenanceClient
	Cluster  pb.ClusterClient
}

func newClient(endpoint string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
}

func (s *server) connect(endpoint string) error {
	c, err := newClient(endpoint)
	if err != nil {
		return err
	}
	s.Endpoint = endpoint
	s.Client = c
	conn := c.ActiveConnection()
	s.KV = pb.NewKVClient(conn)
	s.Lease = pb.NewLeaseClient(conn)
	s.Watch = pb.NewWatchClient(conn)
	s.Maint = pb.NewMaintenanceClient(conn)
	s.Cluster = pb.NewClusterClient(conn)
	return nil
}

// waitReady polls Status until the server answers or deadline passes.
func (s *server) waitReady(deadline time.Time, exited <-chan struct{}) error {
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return fmt.Errorf("process exited before serving (last error: %v)", last)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := s.Maint.Status(ctx, &pb.StatusRequest{})
		if err == nil {
			_, err = s.KV.Range(ctx, &pb.RangeRequest{Key: []byte("readiness")})
		}
		cancel()
		// With auth enabled a request without a token is refused: the
		// server answers, so it serves.
		if err == nil || rpctypes.ErrorDesc(err) == rpctypes.ErrorDesc(rpctypes.ErrGRPCUserEmpty) {
			return nil
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("not ready in time: %v", last)
}

// etcdConfig holds the settings shared by kite flags and the embedded etcd.
type etcdConfig struct {
	progressNotify    time.Duration
	authToken         string
	quotaBackendBytes int64
}

// parseFlags maps the kite flags the tests use onto an embedded etcd config.
func parseFlags(t testing.TB, flags []string) etcdConfig {
	t.Helper()
	var c etcdConfig
	for _, f := range flags {
		name, val, _ := strings.Cut(strings.TrimLeft(f, "-"), "=")
		switch name {
		case "watch-progress-notify-interval":
			d, err := time.ParseDuration(val)
			if err != nil {
				t.Fatalf("flag %s: %v", f, err)
			}
			c.progressNotify = d
		case "auth-token":
			c.authToken = val
		case "quota-backend-bytes":
			n, err := strconv.ParseInt(val, 10, 64)
			if err != nil {
				t.Fatalf("flag %s: %v", f, err)
			}
			c.quotaBackendBytes = n
		default:
			t.Fatalf("flag %q not understood by the embedded etcd (use --name=value)", f)
		}
	}
	return c
}

// etcdServer is a reference etcd embedded in the test process.
type etcdServer struct {
	*server
	e          *embed.Etcd
	dir        string
	cfg        etcdConfig
	clientPort int
	peerPort   int
}

// startEtcd starts a fresh embedded etcd 3.7 on loopback ports.
func startEtcd(t testing.TB, flags ...string) *etcdServer {
	t.Helper()
	es := &etcdServer{server: &server{name: "etcd"}, dir: t.TempDir(), cfg: parseFlags(t, flags)}
	var err error
	for range 3 {
		es.clientPort, es.peerPort = freePort(t), freePort(t)
		if err = es.start(); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("start embedded etcd: %v", err)
	}
	t.Cleanup(es.stop)
	return es
}

func (es *etcdServer) start() error {
	cu := "http://127.0.0.1:" + strconv.Itoa(es.clientPort)
	e, err := testenv.StartEtcd(context.Background(), testenv.EtcdConfig{
		Name:                        "t",
		Dir:                         es.dir,
		ClientURL:                   cu,
		PeerURL:                     "http://127.0.0.1:" + strconv.Itoa(es.peerPort),
		AuthToken:                   es.cfg.authToken,
		QuotaBackendBytes:           es.cfg.quotaBackendBytes,
		WatchProgressNotifyInterval: es.cfg.progressNotify,
		Logger:                      zap.NewNop(),
		ReadyTimeout:                30 * time.Second,
	})
	if err != nil {
		return err
	}
	es.e = e
	if err := es.connect(cu); err != nil {
		e.Close()
		return err
	}
	return nil
}

func (es *etcdServer) stop() {
	if es.Client != nil {
		es.Client.Close()
		es.Client = nil
	}
	if es.e != nil {
		es.e.Close()
		es.e = nil
	}
}

// kiteProcess is kite running as a child process of the test.
type kiteProcess struct {
	*server
	t       testing.TB
	dataDir string
	port    int
	flags   []string
	proc    *testenv.Process // nil when not running
	// exited is closed once the last process started has exited; it
	// stays so after stop, for the tests that ask whether it died.
	exited <-chan struct{}
	log    *syncBuffer
	dev    *etcdServer // KITE_TEST_AGAINST_ETCD=1 only
	// host is the address it serves clients on, 127.0.0.1 when empty;
	// wrap, if set, changes its command line before it starts (to run it
	// in a network namespace).
	host string
	wrap func(*testenv.Command)
}

// startKite starts kite with a fresh data dir and fresh storage of the kind
// under test (KITE_TEST_DATASTORE) on a free loopback port and waits until
// it serves.
func startKite(t testing.TB, extraFlags ...string) *kiteProcess {
	t.Helper()
	if againstEtcd {
		return startKiteIn(t, t.TempDir(), extraFlags...)
	}
	return startKiteIn(t, t.TempDir(), append(freshStorageFlags(t), extraFlags...)...)
}

// startKiteIn starts kite on an existing (or new) data dir with exactly the
// flags given (storage included: SQLite in dataDir unless they say else).
func startKiteIn(t testing.TB, dataDir string, extraFlags ...string) *kiteProcess {
	t.Helper()
	return startKiteProc(t, &kiteProcess{server: &server{name: "kite"}, t: t, dataDir: dataDir, flags: extraFlags, log: &syncBuffer{}})
}

// startKiteProc starts k as its fields say, on a free port, stopped when t
// ends.
func startKiteProc(t testing.TB, k *kiteProcess) *kiteProcess {
	t.Helper()
	extraFlags := k.flags
	if againstEtcd {
		k.dev = startEtcd(t, extraFlags...)
		k.dev.name = "kite"
		k.server = k.dev.server
		return k
	}
	if kiteBuildErr != nil {
		t.Fatalf("kite binary: %v", kiteBuildErr)
	}
	t.Cleanup(func() {
		k.stop()
		if t.Failed() {
			t.Logf("kite log (tail):\n%s", k.log.Tail(8192))
		}
	})
	var err error
	for range 3 {
		k.port = freePort(t)
		if err = k.start(); err == nil {
			return k
		}
		k.stop()
	}
	t.Fatalf("start kite: %v\nlog:\n%s", err, k.log.Tail(8192))
	return nil
}

func (k *kiteProcess) start() error {
	host := k.host
	if host == "" {
		host = "127.0.0.1"
	}
	ep := "http://" + host + ":" + strconv.Itoa(k.port)
	args := append([]string{
		"--name", "t",
		"--data-dir", k.dataDir,
		"--listen-client-urls", ep,
		"--advertise-client-urls", ep,
		"--log-level", "warn",
	}, k.flags...)
	// If the test process dies without cleanup (an embedded etcd that hits
	// a Fatal exits it), kite dies with it (testenv.Start).
	cmd := testenv.Command{Argv: append([]string{kiteBin}, args...), Out: k.log}
	if k.wrap != nil {
		k.wrap(&cmd)
	}
	p, err := testenv.Start(cmd)
	if err != nil {
		return err
	}
	k.proc, k.exited = p, p.Exited()
	if err := k.connect(ep); err != nil {
		return err
	}
	return k.waitReady(time.Now().Add(30*time.Second), k.exited)
}

// stop kills the process (SIGKILL) and waits for it.
func (k *kiteProcess) stop() {
	if k.Client != nil {
		k.Client.Close()
		k.Client = nil
	}
	if k.proc != nil {
		k.proc.Kill()
		k.proc = nil
	}
}

// Kill ends kite abruptly (SIGKILL): no shutdown code runs.
func (k *kiteProcess) Kill() {
	if k.dev != nil {
		k.dev.stop()
		return
	}
	k.stop()
}

// Restart starts kite again on the same data dir and port.
func (k *kiteProcess) Restart() {
	k.t.Helper()
	if k.dev != nil {
		if err := k.dev.start(); err != nil {
			k.t.Fatalf("restart: %v", err)
		}
		return
	}
	fmt.Fprintf(k.log, "\n----- restart -----\n")
	if err := k.start(); err != nil {
		k.t.Fatalf("restart kite: %v\nlog:\n%s", err, k.log.Tail(8192))
	}
}

// syncBuffer collects a child's output.
type syncBuffer = testenv.LogBuffer

// ctx returns a context bounded by a generous timeout, canceled at cleanup.
func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
