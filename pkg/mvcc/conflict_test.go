package mvcc_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/kite-db/kite/pkg/drivers/sqlite"
	"github.com/kite-db/kite/pkg/mvcc"
)

// losing is a Backend on a real SQLite file whose next lose commits are
// aborted as a Galera node aborts a transaction that lost certification:
// rolled back, with the driver's ErrConflict.
type losing struct {
	mvcc.Backend
	mu   sync.Mutex
	lose int
}

func (b *losing) BeginWrite(ctx context.Context) (mvcc.WriteTx, error) {
	tx, err := b.Backend.BeginWrite(ctx)
	if err != nil {
		return nil, err
	}
	return &losingTx{WriteTx: tx, b: b}, nil
}

type losingTx struct {
	mvcc.WriteTx
	b *losing
}

func (t *losingTx) Commit() error {
	t.b.mu.Lock()
	lose := t.b.lose > 0
	if lose {
		t.b.lose--
	}
	t.b.mu.Unlock()
	if lose {
		t.WriteTx.Rollback()
		return fmt.Errorf("commit: %w: Error 1213: Deadlock found when trying to get lock", mvcc.ErrConflict)
	}
	return t.WriteTx.Commit()
}

// TestConflictRetried: a batch the storage aborts for a concurrent writer
// is applied again, and the client sees one successful write at the next
// revision; once it has lost every attempt the client gets ErrConflict and
// nothing was written.
func TestConflictRetried(t *testing.T) {
	ctx := context.Background()
	sb, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "kite.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b := &losing{Backend: sb}
	s, err := mvcc.Open(ctx, b, mvcc.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close(); sb.Close() }()

	b.mu.Lock()
	b.lose = 3
	b.mu.Unlock()
	resp, err := s.Put(ctx, &pb.PutRequest{Key: []byte("a"), Value: []byte("1")})
	if err != nil {
		t.Fatalf("put after 3 lost attempts: %v", err)
	}
	if resp.Header.Revision != 2 || s.WriteConflicts() != 3 {
		t.Errorf("put at revision %d after %d conflicts; want 2 and 3", resp.Header.Revision, s.WriteConflicts())
	}

	b.mu.Lock()
	b.lose = 1000
	b.mu.Unlock()
	_, err = s.Put(ctx, &pb.PutRequest{Key: []byte("b"), Value: []byte("2")})
	if !errors.Is(err, mvcc.ErrConflict) {
		t.Fatalf("put that loses every attempt: %v; want ErrConflict", err)
	}
	b.mu.Lock()
	b.lose = 0
	b.mu.Unlock()
	got, err := s.Range(ctx, &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte{0}})
	if err != nil || got.Header.Revision != 2 || len(got.Kvs) != 1 {
		t.Fatalf("after the failed put: revision %d, %d keys, %v; want revision 2 and key a alone", got.GetHeader().GetRevision(), len(got.Kvs), err)
	}
	if resp, err := s.Put(ctx, &pb.PutRequest{Key: []byte("b"), Value: []byte("2")}); err != nil || resp.Header.Revision != 3 {
		t.Fatalf("put once writes win again: %v, %v; want revision 3", resp, err)
	}
}
