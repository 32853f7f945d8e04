package main

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/pprof"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kite-db/kite/internal/testenv"
)

// A profiled workload leaves a CPU profile and, taken as it ends, a heap
// profile of the server, fetched from the handlers kite's --enable-pprof
// serves (net/http/pprof's own).
func TestStartProfilesWritesCPUAndHeap(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.Handle("/debug/pprof/heap", pprof.Handler("heap"))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	dir := t.TempDir()
	cfg := &config{profile: map[string]bool{"put@64": true}, profileDir: dir, duration: 2 * time.Second}
	// One server: a test process's runtime takes one CPU profile at a time.
	servers := []*testenv.ToolServer{{Name: "kite-0", Endpoint: srv.URL}}
	tg := &target{name: "kite", cl: &cluster{Cluster: &testenv.Cluster{Name: "kite", Servers: servers}}}
	startProfiles(context.Background(), cfg, slog.New(slog.DiscardHandler), tg, "put@64")()

	for _, name := range []string{"kite-put@64.pprof", "kite-put@64.heap.pprof"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		// A profile is a gzipped protocol buffer.
		if !bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
			t.Errorf("%s: %d bytes, not a gzipped profile", name, len(b))
		}
	}
}
