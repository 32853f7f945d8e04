package mysql

import (
	"context"
	"slices"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/kite-db/kite/pkg/drivers/mysql/mysqltest"
	"github.com/kite-db/kite/pkg/mvcc"
)

func openPair(t *testing.T) (a, b *Backend, dsn string) {
	t.Helper()
	dsn = mysqltest.NewDatabase(t)
	for _, p := range []**Backend{&a, &b} {
		bk, err := Open(context.Background(), dsn, Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = bk.Close() })
		*p = bk
	}
	// a registered b's connection before it answered b's hello, so from
	// the moment b's Open returns a commit through a wakes b.
	if a.wake.peers() != 1 {
		t.Fatalf("b's Open returned before a had its connection (%d peers)", a.wake.peers())
	}
	return a, b, dsn
}

func put(t *testing.T, b *Backend, key string) int64 {
	t.Helper()
	ctx := context.Background()
	tx, err := b.BeginWrite(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cur, comp, err := tx.Revisions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rev := cur + 1
	kv := &mvccpb.KeyValue{Key: []byte(key), CreateRevision: rev, ModRevision: rev, Version: 1, Value: []byte("v")}
	if err := tx.Put(ctx, kv, 0); err != nil {
		t.Fatal(err)
	}
	if err := tx.SetRevisions(ctx, rev, comp); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	return rev
}

// awaitRev waits for a notice of rev or later, or a resync.
func awaitRev(t *testing.T, ch <-chan mvcc.Notice, rev int64, within time.Duration) mvcc.Notice {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case n := <-ch:
			if n.Rev >= rev || n.Resync {
				return n
			}
		case <-deadline:
			t.Fatalf("no notice of revision %d within %v", rev, within)
		}
	}
}

// TestWakeLatency measures how soon a commit reaches the other server
// (logged, not asserted: the machine is shared).
func TestWakeLatency(t *testing.T) {
	a, b, _ := openPair(t)
	var lat []time.Duration
	for i := range 200 {
		start := time.Now()
		rev := put(t, b, "k"+string(rune('a'+i%26)))
		awaitRev(t, a.Notices(), rev, 5*time.Second)
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	t.Logf("commit to the other server's notice: p50 %v, p99 %v, max %v (COMMIT included)",
		lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1])
}

// TestWakeReconnectResyncs: a wake-up connection that drops is made again
// and followed by a Resync, since wake-ups may have been lost with it.
func TestWakeReconnectResyncs(t *testing.T) {
	a, _, _ := openPair(t)
	before := a.wake.reconnects.Load()
	a.wake.mu.Lock()
	for pc := range a.wake.conns {
		pc.shut()
	}
	a.wake.mu.Unlock()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case n := <-a.Notices():
			if n.Resync {
				if a.wake.reconnects.Load() <= before {
					t.Error("a resync without a reconnect counted")
				}
				if polls, _, peers := a.WakeStats(); peers != 1 || polls != 0 {
					t.Errorf("after the reconnect: %d peers, %d polls; want 1 and 0", peers, polls)
				}
				return
			}
		case <-deadline:
			t.Fatal("no Resync within 10 s of the wake-up connection dropping")
		}
	}
}

// TestWakeFallbackPolls: while a live server cannot be reached (its row is
// fresh, its address answers nothing), the other polls the database every
// second and still learns of its commits, shows it in WakeStats, and stops
// polling once the server is gone from kite_server.
func TestWakeFallbackPolls(t *testing.T) {
	a, b, dsn := openPair(t)
	admin := mysqltest.Open(t, dsn)
	if polls, degraded, peers := a.WakeStats(); polls != 0 || degraded || peers != 1 {
		t.Fatalf("healthy: %d polls, degraded %v, %d peers; want 0, false, 1", polls, degraded, peers)
	}
	// b's wake-ups stop (listener and connections closed, its row
	// deleted); its row is written back, fresh, as if b were alive but
	// cut off.
	name := b.wake.name
	b.wake.close()
	alive := func() {
		if _, err := admin.Exec(sqlAlive, name, "127.0.0.1:1"); err != nil {
			t.Error(err)
		}
	}
	alive()
	// b's close has already woken a, which found b gone; the next drop
	// of a connection to a live b would wake it the same way.
	a.wake.poke()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(2 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				alive()
			}
		}
	}()
	rev := put(t, b, "cut-off")
	n := awaitRev(t, a.Notices(), rev, 5*time.Second)
	if n.Resync {
		n = awaitRev(t, a.Notices(), rev, 5*time.Second)
	}
	polls, degraded, _ := a.WakeStats()
	if polls == 0 || !degraded {
		t.Fatalf("a server unreachable: %d polls, degraded %v; want polls and degraded", polls, degraded)
	}
	if n.Changed != allChanged {
		t.Errorf("a poll's notice %+v: want every state re-read", n)
	}
	close(stop)
	<-done
	if _, err := admin.Exec(sqlLeave, name); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, degraded, _ := a.WakeStats(); !degraded {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("still degraded 10 s after the unreachable server left kite_server")
		}
		time.Sleep(100 * time.Millisecond)
	}
	p1, _, _ := a.WakeStats()
	time.Sleep(2500 * time.Millisecond)
	if p2, _, _ := a.WakeStats(); p2 != p1 {
		t.Errorf("polls went on while every server was reachable: %d then %d", p1, p2)
	}
}
