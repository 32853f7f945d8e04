package test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// kine (github.com/k3s-io/kine, k3s's etcd shim) is a source users move to
// kite from. It is not a dependency of kite's module: kineBin builds it
// with `kite-bench build-kine`, which runs `go install` on kine's own
// module at the version kite-bench pins (v0.17.5) into kite-bench's cache
// directory, so the tests and kite-bench share one build and neither
// touches kite's go.mod. KITE_TEST_KINE=PATH uses a kine binary instead.
var (
	kineOnce sync.Once
	kinePath string
	kineErr  error
)

// kineBin returns the kine binary, building it the first time (a few
// minutes, then cached). A kine that cannot be had fails the test under
// CI=true and skips it elsewhere: building needs the Go module proxy.
func kineBin(t testing.TB) string {
	t.Helper()
	kineOnce.Do(func() { kinePath, kineErr = findKine() })
	if kineErr != nil {
		msg := fmt.Sprintf("kine v0.17.5 unavailable (set KITE_TEST_KINE to a kine binary, or let `go run ./cmd/kite-bench build-kine` reach the Go module proxy): %v", kineErr)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return kinePath
}

func findKine() (string, error) {
	if p := os.Getenv("KITE_TEST_KINE"); p != "" {
		return exec.LookPath(p)
	}
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "run", "./cmd/kite-bench", "build-kine")
	cmd.Dir = root
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go run ./cmd/kite-bench build-kine: %w\n%s", err, stderr.String())
	}
	// build-kine prints the binary's path as its last line.
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return exec.LookPath(lines[len(lines)-1])
}

// kineProcess is kine serving etcd clients on a loopback port, on its
// default SQLite database (db/state.db under its working directory).
type kineProcess struct {
	*server
	dir string
	log *syncBuffer
}

// startKine starts kine in a new temporary directory and waits until it
// answers reads.
func startKine(t testing.TB) *kineProcess {
	t.Helper()
	bin := kineBin(t)
	k := &kineProcess{server: &server{name: "kine"}, dir: t.TempDir(), log: &syncBuffer{}}
	var err error
	for range 3 {
		if err = k.start(t, bin); err == nil {
			return k
		}
	}
	t.Fatalf("start kine: %v\nlog:\n%s", err, k.log.tail(8192))
	return nil
}

func (k *kineProcess) start(t testing.TB, bin string) error {
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	// --metrics-bind-address 0: kine's metrics would listen on every
	// interface's port 8080. Its compactor is off by default (v0.17.5):
	// only the Compact calls the test makes compact it.
	cmd := exec.Command(bin, "--listen-address", addr, "--metrics-bind-address", "0")
	cmd.Dir = k.dir
	cmd.Env = append(os.Environ(), "KINE_ENDPOINT=") // its default SQLite, whatever the caller's environment says
	cmd.Stdout, cmd.Stderr = k.log, k.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", bin, err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	stop := func() {
		if k.Client != nil {
			k.Client.Close()
			k.Client = nil
		}
		cmd.Process.Kill()
		<-exited
	}
	if err := k.connect("http://" + addr); err != nil {
		stop()
		return fmt.Errorf("connect to kine: %w", err)
	}
	if err := k.waitReady(time.Now().Add(30*time.Second), exited); err != nil {
		stop()
		return fmt.Errorf("kine on %s: %w", addr, err)
	}
	if _, err := os.Stat(filepath.Join(k.dir, "db", "state.db")); err != nil {
		stop()
		return fmt.Errorf("kine is not on its default SQLite database: %w", err)
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("kine log (tail):\n%s", k.log.tail(4096))
		}
	})
	return nil
}
