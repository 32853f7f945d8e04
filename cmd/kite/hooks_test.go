package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/kite-db/kite/internal/freeport"
)

// TestReleaseBinaryHasNoTestHooks: kite built without -tags kitetest does
// not serve raftsql's peer fault hook even with KITE_TEST_PEER_FAULTS=1,
// while a kitetest build does (so the probe itself is sound).
func TestReleaseBinaryHasNoTestHooks(t *testing.T) {
	if testing.Short() {
		t.Skip("builds kite twice")
	}
	for _, tc := range []struct {
		tags string
		want int
	}{
		{"", http.StatusNotFound},
		{"kitetest", http.StatusOK},
	} {
		t.Run("tags="+tc.tags, func(t *testing.T) {
			bin := filepath.Join(t.TempDir(), "kite")
			build := exec.Command("go", "build", "-tags", tc.tags, "-o", bin, ".")
			if out, err := build.CombinedOutput(); err != nil {
				t.Fatalf("go build -tags %q: %v\n%s", tc.tags, err, out)
			}
			if got := probeFaultHook(t, bin); got != tc.want {
				t.Fatalf("POST /kite/test/fail-apply on a build with tags %q: %d; want %d", tc.tags, got, tc.want)
			}
		})
	}
}

// probeFaultHook starts bin as a one-member raftsql cluster with the fault
// hook asked for and returns the status its peer URL answers it with.
func probeFaultHook(t *testing.T, bin string) int {
	t.Helper()
	client, peer := loopbackURL(t), loopbackURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--name", "m", "--data-dir", t.TempDir(),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "m="+peer)
	cmd.Env = append(os.Environ(), "KITE_TEST_PEER_FAULTS=1")
	log, err := os.Create(filepath.Join(t.TempDir(), "kite.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	// /kite/members is served by every build once the peers are.
	for {
		resp, err := http.Get(peer + "/kite/members")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if ctx.Err() != nil {
			b, _ := os.ReadFile(log.Name())
			t.Fatalf("kite never served its peer URL %s:\n%s", peer, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
	resp, err := http.Post(peer+"/kite/test/fail-apply", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// loopbackURL is an http URL on a loopback port that was free a moment ago
// (internal/freeport: below the ephemeral range).
func loopbackURL(t *testing.T) string {
	t.Helper()
	port, err := freeport.One()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("http://127.0.0.1:%d", port)
}
