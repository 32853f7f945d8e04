package server

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/kite-db/kite/pkg/drivers/sqlite"
	"github.com/kite-db/kite/pkg/mvcc"
)

// testLogger discards logs unless the test runs with -v (and has a tb to
// write to).
func testLogger(tb testing.TB) *slog.Logger {
	if testing.Verbose() && tb != nil {
		return slog.New(slog.NewTextHandler(tb.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// mustOpenStore opens a store over a fresh SQLite file in tb.TempDir(),
// closed when the test ends.
func mustOpenStore(tb testing.TB) *mvcc.Store {
	tb.Helper()
	ctx := context.Background()
	b, err := sqlite.Open(ctx, filepath.Join(tb.TempDir(), "kite.db"), sqlite.Options{Logger: testLogger(tb)})
	if err != nil {
		tb.Fatalf("open sqlite: %v", err)
	}
	s, err := mvcc.Open(ctx, b, mvcc.Config{Logger: testLogger(tb)})
	if err != nil {
		b.Close()
		tb.Fatalf("open store: %v", err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Errorf("close store: %v", err)
		}
		if err := b.Close(); err != nil {
			tb.Errorf("close backend: %v", err)
		}
	})
	return s
}

// sqliteIn opens the test's storage: a SQLite file in dir, as kite's default
// datastore does.
func sqliteIn(dir string) func(ctx context.Context) (mvcc.Backend, error) {
	return func(ctx context.Context) (mvcc.Backend, error) {
		return sqlite.Open(ctx, filepath.Join(dir, "kite.db"), sqlite.Options{})
	}
}

// mustStartServer starts a whole server on a free loopback port with a
// temporary data dir and returns it with its client endpoint.
func mustStartServer(tb testing.TB, cfg Config) (*Server, string) {
	tb.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = tb.TempDir()
	}
	if cfg.OpenBackend == nil {
		cfg.OpenBackend = sqliteIn(cfg.DataDir)
	}
	if len(cfg.ListenClientURLs) == 0 {
		cfg.ListenClientURLs = []string{"http://127.0.0.1:0"}
	}
	cfg.Logger = testLogger(tb)
	s, err := New(context.Background(), cfg)
	if err != nil {
		tb.Fatalf("new server: %v", err)
	}
	if err := s.Start(); err != nil {
		s.Close()
		tb.Fatalf("start server: %v", err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Errorf("close server: %v", err)
		}
	})
	return s, addrString(s.Addrs()[0])
}
