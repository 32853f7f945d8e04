package test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kite-db/kite/pkg/drivers/postgres/pgtest"
)

// TestPostgresPartitionedServer: two kite servers on one Postgres, each in
// a network namespace of its own, with writers and a watcher on each; then
// every packet between server A and the database is dropped (both ways,
// in A's namespace; the test's clients still reach A), and later the link
// heals. While cut off, A acknowledges nothing and its /readyz fails
// within seconds, while B goes on (after a stall of up to the database's
// keepalive time, about 11 s, if A was cut in the middle of a write
// transaction, whose lock on the revision row lives as long as A's
// session). The once-only jobs move to B if A held
// them: a lease granted through B and left alone expires, while a lease
// kept alive through B does not, even though A, cut off, never heard of
// those renewals and believed itself primary until it stepped down. After
// the heal A serves again, and both watchers saw one dense order holding
// every acknowledged write.
func TestPostgresPartitionedServer(t *testing.T) {
	if againstEtcd {
		t.Skip("the servers share a Postgres database: kite's postgres mode")
	}
	nw := newNetnsNet(t, 2)
	host := nw.host
	pg := pgtest.NewCluster(t, host)
	dsn := fmt.Sprintf("postgres://postgres@%s:%d/postgres?sslmode=disable&connect_timeout=2", host, pg.Port)
	var ks []*kiteProcess
	for i := range nw.ns {
		ks = append(ks, startKiteProc(t, &kiteProcess{
			server: &server{name: fmt.Sprintf("kite%d", i)}, t: t, dataDir: t.TempDir(),
			flags: []string{"--datastore-endpoint", dsn}, log: &syncBuffer{},
			host: nw.ips[i], wrap: nw.inNamespace(i),
		}))
	}
	a, b := ks[0], ks[1]
	ctx := testCtx(t, 3*time.Minute)
	const prefix = "/pgpart/"
	ws := watchEvery(ctx, t, ks, prefix)
	wr := startWriters(ctx, t, ks, func(ctx context.Context, c *clientv3.Client, i, n int) (ack, error) {
		key, value := fmt.Sprintf("%ss%d/k%05d", prefix, i, n), fmt.Sprintf("v%d-%d", i, n)
		resp, err := c.Put(ctx, key, value)
		if err != nil {
			return ack{}, err
		}
		return ack{key, value, resp.Header.Revision}, nil
	})
	stopped := false
	defer func() {
		if !stopped {
			wr.stop()
		}
	}()

	// Two leases through B: one left to expire, one kept alive through B.
	leased := func(name string) clientv3.LeaseID {
		l, err := b.Client.Grant(ctx, 4)
		if err != nil {
			t.Fatalf("grant: %v", err)
		}
		if _, err := b.Client.Put(ctx, prefix+name, name, clientv3.WithLease(l.ID)); err != nil {
			t.Fatalf("put on a lease: %v", err)
		}
		return l.ID
	}
	leased("expiring")
	kept := leased("kept")
	kaCtx, kaCancel := context.WithCancel(ctx)
	defer kaCancel()
	ka, err := b.Client.KeepAlive(kaCtx, kept)
	if err != nil {
		t.Fatalf("keep alive through B: %v", err)
	}
	go func() {
		for range ka {
		}
	}()
	time.Sleep(time.Second)

	// Cut A from the database only: Postgres's port on the bridge address.
	cut := fmt.Sprintf("add rule inet %[1]s output ip daddr %[2]s tcp dport %[3]d drop\n"+
		"add rule inet %[1]s input ip saddr %[2]s tcp sport %[3]d drop\n", nsTable, host, pg.Port)
	if err := nw.nft(0, cut); err != nil {
		t.Fatal(err)
	}
	cutAt := time.Now()
	waitUntil(t, 20*time.Second, "A's /readyz failing while cut from the database", func() bool {
		code, _ := httpGet(t, a.Endpoint+"/readyz")
		return code != http.StatusOK
	})
	t.Logf("A not ready %v after the cut", time.Since(cutAt).Round(100*time.Millisecond))
	wctx, wcancel := context.WithTimeout(ctx, 3*time.Second)
	_, err = a.Client.Put(wctx, prefix+"through-a", "x")
	wcancel()
	if err == nil {
		t.Fatal("A acknowledged a write while cut from the database")
	}
	// B's writes may stall until the database drops A's session (its
	// keepalives and TCP user timeout: about 11 s), since a write
	// transaction of A's cut off mid-way holds the revision row's lock
	// until then.
	waitUntil(t, 30*time.Second, "B acknowledging writes while A is cut off", func() bool {
		bctx, bcancel := context.WithTimeout(ctx, 3*time.Second)
		defer bcancel()
		_, err := b.Client.Put(bctx, prefix+"through-b", "x")
		return err == nil
	})
	t.Logf("B acknowledging %v after the cut", time.Since(cutAt).Round(100*time.Millisecond))
	waitUntil(t, 45*time.Second, "the lease left alone expiring while A is cut off", func() bool {
		resp, err := b.Client.Get(ctx, prefix+"expiring")
		return err == nil && len(resp.Kvs) == 0
	})
	t.Logf("the unrenewed lease expired %v after the cut", time.Since(cutAt).Round(100*time.Millisecond))

	if err := nw.nft(0, fmt.Sprintf("flush table inet %s\n", nsTable)); err != nil {
		t.Fatal(err)
	}
	healedAt := time.Now()
	waitUntil(t, 90*time.Second, "A acknowledging writes again after the heal", func() bool {
		wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
		defer wcancel()
		_, err := a.Client.Put(wctx, prefix+"a-back", "x")
		return err == nil
	})
	t.Logf("A acknowledged again %v after the heal", time.Since(healedAt).Round(100*time.Millisecond))
	// A few seconds with both serving: A, no longer primary, revokes
	// nothing it did not hear renewed.
	time.Sleep(6 * time.Second)
	acks, failed := wr.stop()
	stopped = true
	t.Logf("acknowledged writes: %d; failed per server: %v", len(acks), failed)
	var last int64
	for i, k := range ks {
		resp, err := k.Client.Get(ctx, prefix+"kept")
		if err != nil || len(resp.Kvs) != 1 {
			t.Errorf("server %d: the key on the lease kept alive through B: %v, %v", i, resp, err)
		}
		last = max(last, resp.Header.Revision)
	}
	ws.waitFor(t, ks, last)
	checkOneOrder(t, ws.stop(), last, acks)
}
