package postgres_test

import (
	"context"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/kite-db/kite/pkg/drivers/postgres"
	"github.com/kite-db/kite/pkg/drivers/postgres/pgtest"
	"github.com/kite-db/kite/pkg/mvcc"
)

// forcedPrimary is a real Backend whose Store believes it holds the primary
// lock whatever the lock says, and, when deaf, never hears of renewals made
// through the other servers. It is the worst a server can be while the lock
// changes hands (the old holder has not noticed its loss yet) or while its
// notifications are lost: a lease expiry clock that missed renewals.
type forcedPrimary struct {
	*postgres.Backend
	primary chan bool
	notices chan mvcc.Notice
}

func newForcedPrimary(b *postgres.Backend, deaf bool) *forcedPrimary {
	f := &forcedPrimary{Backend: b, primary: make(chan bool, 1), notices: make(chan mvcc.Notice)}
	f.primary <- true
	go func() {
		defer close(f.primary)
		for range b.Primary() {
		}
	}()
	go func() {
		defer close(f.notices)
		for n := range b.Notices() {
			if deaf && n.Renewed != 0 {
				continue
			}
			f.notices <- n
		}
	}()
	return f
}

func (f *forcedPrimary) Primary() <-chan bool        { return f.primary }
func (f *forcedPrimary) Notices() <-chan mvcc.Notice { return f.notices }
func (f *forcedPrimary) openStore(t *testing.T) *mvcc.Store {
	t.Helper()
	s, err := mvcc.Open(context.Background(), f, mvcc.Config{})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() {
		s.Close()
		f.Backend.Close()
	})
	return s
}

// TestTwoPrimariesNeverRevokeARenewedLease runs lease expiry on two servers
// at once, one of which never hears of the renewals the other makes. The
// deaf one's clock says the lease is due after its TTL; the database, which
// recorded every renewal, must refuse that revoke, so the key stays while
// the lease is kept alive and goes once it is not.
func TestTwoPrimariesNeverRevokeARenewedLease(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	ctx := context.Background()
	open := func(deaf bool) *mvcc.Store {
		b, err := postgres.Open(ctx, dsn, postgres.Options{})
		if err != nil {
			t.Fatalf("open backend: %v", err)
		}
		return newForcedPrimary(b, deaf).openStore(t)
	}
	deaf, renewer := open(true), open(false)

	const ttl = 2
	g, err := renewer.LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: 42, TTL: ttl})
	if err != nil {
		t.Fatalf("grant: %v", err)
	}
	if _, err := renewer.Put(ctx, &pb.PutRequest{Key: []byte("held"), Value: []byte("v"), Lease: g.ID}); err != nil {
		t.Fatalf("put: %v", err)
	}

	// Keep the lease alive through the renewer for three TTLs: the deaf
	// server's clock runs out after one.
	keepUntil := time.Now().Add(3 * ttl * time.Second)
	for time.Now().Before(keepUntil) {
		if _, err := renewer.LeaseRenew(ctx, g.ID); err != nil {
			t.Fatalf("renew at %v before the end: %v (the deaf server revoked a live lease)", time.Until(keepUntil), err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	for name, s := range map[string]*mvcc.Store{"deaf": deaf, "renewer": renewer} {
		resp, err := s.Range(ctx, &pb.RangeRequest{Key: []byte("held"), Serializable: false})
		if err != nil {
			t.Fatalf("%s: range: %v", name, err)
		}
		if len(resp.Kvs) != 1 {
			t.Fatalf("%s: key of a renewed lease is gone (%d kvs)", name, len(resp.Kvs))
		}
	}

	// Left alone, the lease expires as usual.
	deadline := time.Now().Add(ttl*time.Second + 10*time.Second)
	for {
		resp, err := renewer.Range(ctx, &pb.RangeRequest{Key: []byte("held")})
		if err != nil {
			t.Fatalf("range: %v", err)
		}
		if len(resp.Kvs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lease not revoked %v after its last renewal", time.Since(keepUntil))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := renewer.LeaseRenew(ctx, g.ID); err == nil {
		t.Fatalf("renewed a revoked lease")
	}
}
