package k8s

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/kubernetes"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"

	"k8s.io/apiserver/pkg/storage/etcd3/testserver"
	storagetesting "k8s.io/apiserver/pkg/storage/testing"

	"github.com/kite-db/kite/internal/testenv"
	"github.com/kite-db/kite/pkg/drivers/mysql/mysqltest"
	"github.com/kite-db/kite/pkg/drivers/postgres/pgtest"
)

// The suite runs against a kite built from this repository and started as a
// child process, one fresh server per test as upstream does with its embedded
// etcd. KITE_K8S_BACKEND=etcd runs the very same tests against an embedded
// etcd instead (upstream's testserver.RunEtcd), which proves the suite itself.
//
// KITE_K8S_DATASTORE chooses kite's storage: sqlite (default, kite.db in the
// server's data dir), postgres (every kite gets a fresh database of its own
// on the Postgres server of KITE_TEST_POSTGRES; see postgres_test.go), mysql
// (the same on the MySQL or MariaDB server of KITE_TEST_MYSQL; see
// mysql_test.go) or raftsql (every kite is one member of a fresh 3-member raft cluster, the
// two others started alongside it; the suite talks to that one member; see
// raftsql_test.go).
//
// KITE_K8S_TLS=1 serves every kite over mutual TLS (tls_test.go).
//
// KITE_K8S_KITE_FLAGS adds flags (split at spaces) to every kite the suite
// starts, raft peers included: --experimental-sqlite-log-commit runs the
// suite on kite's log commit (TestStorageUnderTest then checks that the log
// exists).
var (
	backend   = envOr("KITE_K8S_BACKEND", "kite")
	datastore = envOr("KITE_K8S_DATASTORE", "sqlite")
	kiteFlags = strings.Fields(os.Getenv("KITE_K8S_KITE_FLAGS"))
	kiteBin   string
	// kiteTLS is the PKI of a KITE_K8S_TLS=1 run; nil otherwise.
	kiteTLS *k8sTLS
)

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	switch datastore {
	case "sqlite", "postgres", "mysql", "raftsql":
	default:
		fmt.Fprintf(os.Stderr, "KITE_K8S_DATASTORE=%q: want sqlite, postgres, mysql or raftsql\n", datastore)
		return 2
	}
	switch backend {
	case "etcd":
		if datastore != "sqlite" {
			fmt.Fprintf(os.Stderr, "KITE_K8S_DATASTORE=%s chooses kite's storage: it means nothing with KITE_K8S_BACKEND=etcd\n", datastore)
			return 2
		}
		fmt.Println("k8s storage suite: backend = embedded etcd")
	case "kite":
		bin, cleanup, err := buildKite()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer cleanup()
		kiteBin = bin
		fmt.Printf("k8s storage suite: backend = kite (%s) %s\n", datastore, bin)
		if len(kiteFlags) > 0 {
			fmt.Println("k8s storage suite: every kite also gets", strings.Join(kiteFlags, " "))
		}
		if datastore == "postgres" {
			fmt.Println("k8s storage suite: a fresh Postgres database per kite on", adminWhere(pgtest.AdminDSN()))
		}
		if datastore == "mysql" {
			fmt.Println("k8s storage suite: a fresh MySQL database per kite on", mysqltest.AdminDSN())
		}
		if datastore == "raftsql" {
			fmt.Println("k8s storage suite: every kite one member of a fresh 3-member raft cluster; the tests talk to that member")
		}
		if os.Getenv("KITE_K8S_TLS") == "1" {
			dir, err := os.MkdirTemp("", "kite-k8s-tls-")
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			defer os.RemoveAll(dir)
			if kiteTLS, err = newK8sTLS(dir); err != nil {
				fmt.Fprintln(os.Stderr, "KITE_K8S_TLS:", err)
				return 1
			}
			fmt.Println("k8s storage suite: over mutual TLS (https, --client-cert-auth)")
		}
	default:
		fmt.Fprintf(os.Stderr, "KITE_K8S_BACKEND=%q: want kite or etcd\n", backend)
		return 2
	}
	return m.Run()
}

// buildKite builds ./cmd/kite of the enclosing repository (the main
// module this one replaces with ../..), or uses KITE_BIN.
func buildKite() (string, func(), error) {
	if bin := os.Getenv("KITE_BIN"); bin != "" {
		return bin, func() {}, nil
	}
	root, err := testenv.ModuleRoot(".")
	if err != nil {
		return "", nil, err
	}
	dir, err := os.MkdirTemp("", "kite-k8s-")
	if err != nil {
		return "", nil, err
	}
	cleanup := func() { os.RemoveAll(dir) }
	bin, err := testenv.BuildKite(root, dir)
	if err != nil {
		cleanup()
		return "", nil, fmt.Errorf("build kite: %w", err)
	}
	return bin, cleanup, nil
}

// serverOptions are the server settings a test needs; zero means etcd's default.
type serverOptions struct {
	progressNotifyInterval time.Duration
}

// runServer starts a fresh server for t and returns a client wired with
// upstream's request recorders, exactly like testserver.RunEtcd.
func runServer(t testing.TB, opts serverOptions) *kubernetes.Client {
	t.Helper()
	if backend == "etcd" {
		cfg := testserver.NewTestConfig(t)
		if opts.progressNotifyInterval != 0 {
			cfg.WatchProgressNotifyInterval = opts.progressNotifyInterval
		}
		return testserver.RunEtcd(t, cfg)
	}
	endpoint := startKite(t, opts).endpoint
	client, err := kubernetes.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		TLS:         clientTLS(),
		DialTimeout: 10 * time.Second,
		Logger:      zaptest.NewLogger(t, zaptest.Level(zapcore.ErrorLevel)).Named("etcd-client"),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	kubernetesRecorder := storagetesting.NewKubernetesRecorder(client.Kubernetes)
	client.KV = storagetesting.NewKVRecorder(client.KV, kubernetesRecorder)
	client.Kubernetes = kubernetesRecorder
	return client
}

// portLock serialises picking a free port and binding it, as testserver does.
var portLock sync.Mutex

// kiteServer is a kite the suite started.
type kiteServer struct {
	endpoint string // client URL
	dataDir  string // --data-dir
	dsn      string // --datastore-endpoint; "" in sqlite mode
	// raft are the two other members of its cluster in raftsql mode.
	raft []*raftMember
}

// startKite starts kite on a free loopback port and waits until it answers
// Status and a linearizable Get; the process is stopped when t ends (and in
// postgres mode its database dropped after that, in raftsql mode the two
// other members of its cluster killed after that).
func startKite(t testing.TB, opts serverOptions) kiteServer {
	t.Helper()
	portLock.Lock()
	defer portLock.Unlock()
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		k, err := tryStartKite(t, opts)
		if err == nil {
			return k
		}
		lastErr = err
	}
	t.Fatalf("start kite: %v", lastErr)
	return kiteServer{}
}

func tryStartKite(t testing.TB, opts serverOptions) (kiteServer, error) {
	var k kiteServer
	if datastore == "postgres" {
		// Registered before kite's own cleanup, so the database is dropped
		// after kite stopped (t.Cleanup runs last-in first-out).
		k.dsn = pgtest.NewDatabase(t)
	}
	if datastore == "mysql" {
		k.dsn = mysqltest.NewDatabase(t)
	}
	port, err := testenv.FreePort()
	if err != nil {
		return k, err
	}
	scheme := "http"
	if kiteTLS != nil {
		scheme = "https"
	}
	endpoint := fmt.Sprintf("%s://127.0.0.1:%d", scheme, port)
	k.endpoint = endpoint
	k.dataDir = filepath.Join(t.TempDir(), "data")
	args := []string{
		"--name", "kite-k8s",
		"--data-dir", k.dataDir,
		"--listen-client-urls", endpoint,
		"--advertise-client-urls", endpoint,
		"--log-level", "warn",
	}
	if k.dsn != "" {
		args = append(args, "--datastore-endpoint", k.dsn)
	}
	if kiteTLS != nil {
		args = append(args, kiteTLS.kiteFlags()...)
	}
	if opts.progressNotifyInterval != 0 {
		args = append(args, "--watch-progress-notify-interval", opts.progressNotifyInterval.String())
	}
	args = append(args, kiteFlags...)
	var cluster *raftCluster // nil but in raftsql mode
	if datastore == "raftsql" {
		if cluster, err = startRaftPeers(t, "kite-k8s"); err != nil {
			return k, err
		}
		k.raft = cluster.peers
		args = append(args, cluster.flags...)
	}
	logs := &testenv.LogBuffer{}
	proc, err := testenv.Start(testenv.Command{Argv: append([]string{kiteBin}, args...), Out: logs})
	if err != nil {
		cluster.stop()
		return k, err
	}
	stop := func() { proc.Stop(10 * time.Second) }
	if err := waitReady(endpoint, proc); err != nil {
		stop()
		cluster.stop()
		return k, fmt.Errorf("%w; kite output:\n%s%s", err, logs.String(), cluster.logs())
	}
	t.Cleanup(func() {
		stop()
		cluster.stop()
		if t.Failed() {
			if logs.Len() > 0 {
				t.Logf("kite output:\n%s", logs.String())
			}
			if l := cluster.logs(); l != "" {
				t.Log(l)
			}
		}
	})
	if k.dsn != "" {
		// Every kite of postgres or mysql mode must keep its data in its
		// database server, not in an SQLite file of its data dir.
		if _, err := os.Stat(filepath.Join(k.dataDir, "kite.db")); err == nil {
			t.Fatalf("%s mode, but kite created %s", datastore, filepath.Join(k.dataDir, "kite.db"))
		}
	}
	return k, nil
}

// waitReady polls Maintenance.Status and a linearizable Get (in raftsql
// mode: the cluster has a leader and the member has caught up) until kite
// answers, it exits, or 30 s pass.
func waitReady(endpoint string, proc *testenv.Process) error {
	deadline := time.Now().Add(30 * time.Second)
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, TLS: clientTLS(), DialTimeout: time.Second})
	if err != nil {
		return err
	}
	defer client.Close()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := client.Status(ctx, endpoint)
		if err == nil {
			_, err = client.Get(ctx, "/kite-k8s/readiness")
		}
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-proc.Exited():
			return fmt.Errorf("kite exited before it was ready: %v", proc.Err())
		default:
		}
		if time.Now().After(deadline) {
			return errors.Join(errors.New("kite not ready after 30s"), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// clientTLS is the clients' TLS configuration: nil unless KITE_K8S_TLS=1.
func clientTLS() *tls.Config {
	if kiteTLS == nil {
		return nil
	}
	return kiteTLS.client.Clone()
}
