package k8s

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/kubernetes"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"

	"k8s.io/apiserver/pkg/storage/etcd3/testserver"
	storagetesting "k8s.io/apiserver/pkg/storage/testing"
)

// The suite runs against a kite built from this repository and started as a
// child process, one fresh server per test as upstream does with its embedded
// etcd. KITE_K8S_BACKEND=etcd runs the very same tests against an embedded
// etcd instead (upstream's testserver.RunEtcd), which proves the suite itself.
var (
	backend = envOr("KITE_K8S_BACKEND", "kite")
	kiteBin string
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
	switch backend {
	case "etcd":
		fmt.Println("k8s storage suite: backend = embedded etcd")
	case "kite":
		bin, cleanup, err := buildKite()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer cleanup()
		kiteBin = bin
		fmt.Println("k8s storage suite: backend = kite", bin)
	default:
		fmt.Fprintf(os.Stderr, "KITE_K8S_BACKEND=%q: want kite or etcd\n", backend)
		return 2
	}
	return m.Run()
}

// buildKite builds ./cmd/kite of the enclosing repository, or uses KITE_BIN.
func buildKite() (string, func(), error) {
	if bin := os.Getenv("KITE_BIN"); bin != "" {
		return bin, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "kite-k8s-")
	if err != nil {
		return "", nil, err
	}
	cleanup := func() { os.RemoveAll(dir) }
	bin := filepath.Join(dir, "kite")
	cmd := exec.Command("go", "build", "-C", "../..", "-o", bin, "./cmd/kite")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
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
	endpoint := startKite(t, opts)
	client, err := kubernetes.New(clientv3.Config{
		Endpoints:   []string{endpoint},
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

// startKite starts kite on a free loopback port and waits until it answers
// Status. It returns the client URL; the process is stopped when t ends.
func startKite(t testing.TB, opts serverOptions) string {
	t.Helper()
	portLock.Lock()
	defer portLock.Unlock()
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		endpoint, err := tryStartKite(t, opts)
		if err == nil {
			return endpoint
		}
		lastErr = err
	}
	t.Fatalf("start kite: %v", lastErr)
	return ""
}

func tryStartKite(t testing.TB, opts serverOptions) (string, error) {
	port, err := freePort()
	if err != nil {
		return "", err
	}
	endpoint := fmt.Sprintf("http://127.0.0.1:%d", port)
	dir := t.TempDir()
	args := []string{
		"--name", "kite-k8s",
		"--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", endpoint,
		"--advertise-client-urls", endpoint,
		"--log-level", "warn",
	}
	if opts.progressNotifyInterval != 0 {
		args = append(args, "--watch-progress-notify-interval", opts.progressNotifyInterval.String())
	}
	var logs bytes.Buffer
	var logsMu sync.Mutex
	cmd := exec.Command(kiteBin, args...)
	w := &lockedWriter{w: &logs, mu: &logsMu}
	cmd.Stdout, cmd.Stderr = w, w
	// kite must not outlive a test process that dies without cleanup.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return "", err
	}
	var waitErr error
	exited := make(chan struct{})
	go func() { waitErr = cmd.Wait(); close(exited) }()
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	if err := waitReady(endpoint, exited, &waitErr); err != nil {
		stop()
		logsMu.Lock()
		defer logsMu.Unlock()
		return "", fmt.Errorf("%w; kite output:\n%s", err, logs.String())
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			logsMu.Lock()
			defer logsMu.Unlock()
			if logs.Len() > 0 {
				t.Logf("kite output:\n%s", logs.String())
			}
		}
	})
	return endpoint, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitReady polls Maintenance.Status until kite answers, it exits, or 30 s pass.
func waitReady(endpoint string, exited <-chan struct{}, waitErr *error) error {
	deadline := time.Now().Add(30 * time.Second)
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: time.Second})
	if err != nil {
		return err
	}
	defer client.Close()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := client.Status(ctx, endpoint)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("kite exited before it was ready: %v", *waitErr)
		default:
		}
		if time.Now().After(deadline) {
			return errors.Join(errors.New("kite not ready after 30s"), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
