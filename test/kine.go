package test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/kite-db/kite/internal/testenv"
)

// kine (github.com/k3s-io/kine, k3s's etcd shim) is a source users move to
// kite from. It is not a dependency of kite's module: kineBin builds it
// with testenv.BuildKine (go install of kine's own module at the version
// testenv pins) into the cache directory kite-bench uses too, so the
// tests and kite-bench share one build and neither touches kite's go.mod.
// KITE_TEST_KINE=PATH uses a kine binary instead.
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
		msg := fmt.Sprintf("kine %s unavailable (set KITE_TEST_KINE to a kine binary, or let the go command reach the Go module proxy to build it): %v", testenv.KineVersion, kineErr)
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
	dir, err := testenv.DefaultKineDir()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	return testenv.BuildKine(ctx, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})), dir)
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
	t.Fatalf("start kine: %v\nlog:\n%s", err, k.log.Tail(8192))
	return nil
}

func (k *kineProcess) start(t testing.TB, bin string) error {
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	// --metrics-bind-address 0: kine's metrics would listen on every
	// interface's port 8080. Its compactor is off by default (v0.17.5):
	// only the Compact calls the test makes compact it.
	p, err := testenv.Start(testenv.Command{
		Argv: []string{bin, "--listen-address", addr, "--metrics-bind-address", "0"},
		Dir:  k.dir,
		Env:  []string{"KINE_ENDPOINT="}, // its default SQLite, whatever the caller's environment says
		Out:  k.log,
	})
	if err != nil {
		return err
	}
	stop := func() {
		if k.Client != nil {
			k.Client.Close()
			k.Client = nil
		}
		p.Kill()
	}
	if err := k.connect("http://" + addr); err != nil {
		stop()
		return fmt.Errorf("connect to kine: %w", err)
	}
	if err := k.waitReady(time.Now().Add(30*time.Second), p.Exited()); err != nil {
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
			t.Logf("kine log (tail):\n%s", k.log.Tail(4096))
		}
	})
	return nil
}
