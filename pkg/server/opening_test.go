package server

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/kite-db/kite/pkg/mvcc"
)

// TestProbesWhileStorageOpens: while OpenBackend waits (a database that is
// not up yet) the client URL already answers /livez ok and /readyz and
// /health not ready; once the storage opens the server is ready.
func TestProbesWhileStorageOpens(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	release := make(chan struct{})
	open := sqliteIn(dir)
	type result struct {
		s   *Server
		err error
	}
	done := make(chan result, 1)
	go func() {
		s, err := New(context.Background(), Config{
			DataDir:          dir,
			ListenClientURLs: []string{"http://" + addr},
			Logger:           testLogger(t),
			OpenBackend: func(ctx context.Context) (mvcc.Backend, error) {
				<-release
				return open(ctx)
			},
		})
		done <- result{s, err}
	}()

	get := func(path string) (int, string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			resp, err := http.Get("http://" + addr + path)
			if err == nil {
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				return resp.StatusCode, string(body)
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET %s: %v", path, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if code, body := get("/livez"); code != http.StatusOK {
		t.Errorf("/livez while the storage opens = %d %q; want 200", code, body)
	}
	for _, p := range []string{"/readyz", "/health"} {
		if code, body := get(p); code != http.StatusServiceUnavailable {
			t.Errorf("%s while the storage opens = %d %q; want 503", p, code, body)
		}
	}
	close(release)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { r.s.Close() })
	if err := r.s.Start(); err != nil {
		t.Fatal(err)
	}
	if code, body := get("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz once open = %d %q; want 200", code, body)
	}
}
