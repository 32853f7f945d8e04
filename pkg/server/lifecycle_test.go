package server

import (
	"context"
	"net"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestServerUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "kite.sock")
	_, endpoint := mustStartServer(t, Config{ListenClientURLs: []string{"unix://" + sock}})
	if endpoint != "unix://"+sock {
		t.Fatalf("endpoint %q", endpoint)
	}
	cli := newClient(t, endpoint)
	ctx := testContext(t)
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	gr, err := cli.Get(ctx, "k")
	if err != nil || len(gr.Kvs) != 1 {
		t.Fatalf("get over unix socket: %v %v", gr, err)
	}
}

// TestServerCloseWithOpenStreams checks that Close ends watch and keepalive
// streams instead of waiting for clients to go away.
func TestServerCloseWithOpenStreams(t *testing.T) {
	srv, endpoint := mustStartServer(t, Config{})
	cli := newClient(t, endpoint)
	ctx := testContext(t)
	wc := cli.Watch(ctx, "x", clientv3.WithCreatedNotify())
	<-wc
	lg, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.KeepAlive(ctx, lg.ID); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > gracefulStopTimeout+5*time.Second {
		t.Fatalf("Close took %v", d)
	}
}

// TestServerCloseStopsGoroutines: after Close nothing of the server runs,
// compactor included, and with auth enabled etcd's token keeper too.
func TestServerCloseStopsGoroutines(t *testing.T) {
	t.Run("auth off", func(t *testing.T) { testServerCloseStopsGoroutines(t, false) })
	t.Run("auth on", func(t *testing.T) { testServerCloseStopsGoroutines(t, true) })
}

func testServerCloseStopsGoroutines(t *testing.T, withAuth bool) {
	before := runtime.NumGoroutine()
	dir := t.TempDir()
	s, err := New(context.Background(), Config{
		DataDir:                 dir,
		OpenBackend:             sqliteIn(dir),
		ListenClientURLs:        []string{"http://127.0.0.1:0", "unix://" + filepath.Join(t.TempDir(), "s.sock")},
		AutoCompactionMode:      CompactionModePeriodic,
		AutoCompactionRetention: "1h",
		Logger:                  testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	if withAuth {
		enableAuth(t, addrString(s.Addrs()[0]))
	}
	resp, err := http.Get(addrString(s.Addrs()[0]) + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	http.DefaultClient.CloseIdleConnections()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err == nil {
		t.Fatal("Start after Close succeeded")
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines before, %d after Close:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestNewFailsOnBusyPort(t *testing.T) {
	_, endpoint := mustStartServer(t, Config{})
	dir := t.TempDir()
	_, err := New(context.Background(), Config{
		DataDir:          dir,
		OpenBackend:      sqliteIn(dir),
		ListenClientURLs: []string{endpoint},
		Logger:           testLogger(t),
	})
	if err == nil {
		t.Fatal("second server on the same port started")
	}
}

func TestNewFailsOnDataDirInUse(t *testing.T) {
	dir := t.TempDir()
	mustStartServer(t, Config{DataDir: dir})
	_, err := New(context.Background(), Config{DataDir: dir, OpenBackend: sqliteIn(dir), ListenClientURLs: []string{"http://127.0.0.1:0"}, Logger: testLogger(t)})
	if err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second server on the same data dir: %v", err)
	}
}

func TestUnixSocketInUse(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "kite.sock")
	mustStartServer(t, Config{ListenClientURLs: []string{"unix://" + sock}})
	dir := t.TempDir()
	_, err := New(context.Background(), Config{DataDir: dir, OpenBackend: sqliteIn(dir), ListenClientURLs: []string{"unix://" + sock}, Logger: testLogger(t)})
	if err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second server on a live socket: %v", err)
	}
}

// TestCloseWithSilentConnection: a client that connects and never speaks
// must not hold up Close (cmux waits for its first bytes).
func TestCloseWithSilentConnection(t *testing.T) {
	srv, endpoint := mustStartServer(t, Config{})
	c, err := net.Dial("tcp", strings.TrimPrefix(endpoint, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	time.Sleep(50 * time.Millisecond) // let cmux start sniffing it
	done := make(chan error, 1)
	go func() { done <- srv.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(gracefulStopTimeout + 5*time.Second):
		t.Fatal("Close hangs on a silent connection")
	}
}

// enableAuth makes root and turns auth on through a client, which it closes.
func enableAuth(t *testing.T, endpoint string) {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.UserAdd(ctx, "root", "rootpw"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RoleAdd(ctx, "root"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.UserGrantRole(ctx, "root", "root"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AuthEnable(ctx); err != nil {
		t.Fatal(err)
	}
	// A token makes the simple token keeper run.
	ac, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, Username: "root", Password: "rootpw", DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	if _, err := ac.Get(ctx, "k"); err != nil {
		t.Fatal(err)
	}
}
