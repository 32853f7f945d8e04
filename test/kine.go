package test

import (
	"context"
	"errors"
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
// default SQLite database (db/state.db under its working directory) or on
// the datastore endpoint it was started with.
type kineProcess struct {
	*server
	dir string
	// endpoint is kine's KINE_ENDPOINT; "" is its default SQLite.
	endpoint string
	log      *syncBuffer
}

// startKine starts kine in a new temporary directory and waits until it
// answers reads. endpoint is the datastore kine serves, in kine's own
// form (mysql://user@tcp(host:port)/db, postgres://...); "" is its default
// SQLite. A database of mysqltest.NewDatabase is already in kine's MySQL
// form: both take go-sql-driver's DSN behind mysql://.
func startKine(t testing.TB, endpoint string) *kineProcess {
	t.Helper()
	bin := kineBin(t)
	k := &kineProcess{server: &server{name: "kine"}, dir: t.TempDir(), endpoint: endpoint, log: &syncBuffer{}}
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
	// only the Compact calls the test makes compact it. The endpoint goes
	// in the environment, always set, so the caller's KINE_ENDPOINT never
	// chooses kine's database, and a password stays out of ps.
	p, err := testenv.Start(testenv.Command{
		Argv: []string{bin, "--listen-address", addr, "--metrics-bind-address", "0"},
		Dir:  k.dir,
		Env:  []string{"KINE_ENDPOINT=" + k.endpoint},
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
	// A kine on the wrong database would still answer, and the test would
	// copy from a source it did not mean: the default SQLite is a file
	// that must exist, and must not on any other endpoint.
	if _, err := os.Stat(filepath.Join(k.dir, "db", "state.db")); k.endpoint == "" && err != nil {
		stop()
		return fmt.Errorf("kine is not on its default SQLite database: %w", err)
	} else if k.endpoint != "" && err == nil {
		stop()
		return errors.New("kine made its default SQLite database: it is not on the endpoint it was given")
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("kine log (tail):\n%s", k.log.Tail(4096))
		}
	})
	return nil
}
