package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// startProfiles takes a CPU profile of every kite server of t while the
// workload label runs, when --profile names it (or is "all"): kite was
// started with --enable-pprof, which serves /debug/pprof/ on its client
// URL. A profile lasts --duration less a second (so it ends inside the
// workload), 5 s when the workload is bounded by --total only. The
// returned function waits for the profiles and writes
// --profile-dir/kite-LABEL[-sN].pprof.
func startProfiles(ctx context.Context, cfg *config, log *slog.Logger, t *target, label string) (wait func()) {
	if t.cl == nil || t.name != "kite" || !(cfg.profile[label] || cfg.profile["all"]) {
		return func() {}
	}
	seconds := 5
	if cfg.duration > 0 {
		seconds = max(1, int(cfg.duration.Seconds())-1)
	}
	var wg sync.WaitGroup
	for i, p := range t.cl.Servers {
		name := "kite-" + strings.ReplaceAll(label, "/", "_")
		if len(t.cl.Servers) > 1 {
			name += fmt.Sprintf("-s%d", i)
		}
		path := filepath.Join(cfg.profileDir, name+".pprof")
		url := fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", p.Endpoint, seconds)
		heapPath := filepath.Join(cfg.profileDir, name+".heap.pprof")
		heapURL := p.Endpoint + "/debug/pprof/heap"
		wg.Go(func() {
			if err := fetchProfile(ctx, url, path, time.Duration(seconds+30)*time.Second); err != nil {
				log.Warn("CPU profile failed", "server", p.Name, "workload", label, "error", err)
				return
			}
			log.Info("wrote CPU profile", "server", p.Name, "workload", label, "file", path, "seconds", seconds)
			if err := fetchProfile(ctx, heapURL, heapPath, 30*time.Second); err != nil {
				log.Warn("heap profile failed", "server", p.Name, "workload", label, "error", err)
				return
			}
			log.Info("wrote heap profile", "server", p.Name, "workload", label, "file", heapPath)
		})
	}
	return wg.Wait
}

func fetchProfile(ctx context.Context, url, path string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s: %s", url, resp.Status, b)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
