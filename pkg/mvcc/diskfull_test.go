package mvcc_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/kite-db/kite/pkg/drivers/sqlite"
	"github.com/kite-db/kite/pkg/mvcc"
)

// fullDisk is a Backend on a real SQLite file whose commits fail as on a
// full disk while full is set: with the ENOSPC wrapped in ErrDiskFull, as
// the drivers wrap it.
type fullDisk struct {
	mvcc.Backend
	mu   sync.Mutex
	full bool
}

func (b *fullDisk) BeginWrite(ctx context.Context) (mvcc.WriteTx, error) {
	tx, err := b.Backend.BeginWrite(ctx)
	if err != nil {
		return nil, err
	}
	return &fullDiskTx{WriteTx: tx, b: b}, nil
}

type fullDiskTx struct {
	mvcc.WriteTx
	b *fullDisk
}

func (t *fullDiskTx) Commit() error {
	t.b.mu.Lock()
	full := t.b.full
	t.b.mu.Unlock()
	if full {
		t.WriteTx.Rollback()
		return fmt.Errorf("commit: %w: %w", mvcc.ErrDiskFull, syscall.ENOSPC)
	}
	return t.WriteTx.Commit()
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestDiskFullLogged: writes failing on a full disk are answered with the
// error and the cause is logged once (not once per write); once space is
// back writes succeed.
func TestDiskFullLogged(t *testing.T) {
	ctx := context.Background()
	sb, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "kite.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b := &fullDisk{Backend: sb}
	var logs syncBuf
	s, err := mvcc.Open(ctx, b, mvcc.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close(); sb.Close() }()
	b.mu.Lock()
	b.full = true
	b.mu.Unlock()
	for i := range 3 {
		if _, err := s.Put(ctx, &pb.PutRequest{Key: fmt.Appendf(nil, "k%d", i), Value: []byte("v")}); err == nil {
			t.Fatalf("put %d on a full disk succeeded", i)
		}
	}
	if n := strings.Count(logs.String(), "the disk is full"); n != 1 {
		t.Errorf("full disk logged %d times over 3 failed writes; want once:\n%s", n, logs.String())
	}
	b.mu.Lock()
	b.full = false
	b.mu.Unlock()
	if _, err := s.Put(ctx, &pb.PutRequest{Key: []byte("after"), Value: []byte("v")}); err != nil {
		t.Fatalf("put once space is back: %v", err)
	}
}
