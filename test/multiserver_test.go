package test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kite-db/kite/pkg/drivers/mysql/mysqltest"
	"github.com/kite-db/kite/pkg/drivers/postgres/pgtest"
)

// sharedKinds are the database-server storage modes in which several kite
// servers share one database (their drivers implement mvcc.Shared).
var sharedKinds = []string{"postgres", "mysql"}

// forEachSharedKind runs f as a subtest per database-server kind, named
// after it: one test body, run against every driver.
func forEachSharedKind(t *testing.T, f func(t *testing.T, kind string)) {
	t.Helper()
	for _, kind := range sharedKinds {
		t.Run(kind, func(t *testing.T) { f(t, kind) })
	}
}

// newSharedDatabase creates a fresh database of the given kind and returns
// its DSN (pgtest and mysqltest say where the servers are found).
func newSharedDatabase(t *testing.T, kind string) string {
	t.Helper()
	switch kind {
	case "postgres":
		return pgtest.NewDatabase(t)
	case "mysql":
		return mysqltest.NewDatabase(t)
	}
	t.Fatalf("newSharedDatabase: unknown kind %q; want one of %v", kind, sharedKinds)
	return ""
}

// startShared starts n kite servers, each with the extra flags, on one fresh
// database of the given kind.
func startShared(t *testing.T, kind string, n int, flags ...string) []*kiteProcess {
	t.Helper()
	dsn := newSharedDatabase(t, kind)
	var ks []*kiteProcess
	for range n {
		ks = append(ks, startKiteIn(t, t.TempDir(), append([]string{"--datastore-endpoint", dsn}, flags...)...))
	}
	return ks
}

// TestSharedServersOneOrder: three kite servers on one database, a writer and
// a watcher on each, one server SIGKILLed and restarted mid-run. Every
// watcher sees the identical event sequence, revisions are dense, every
// acknowledged write is in it, and HashKV agrees at the last revision.
func TestSharedServersOneOrder(t *testing.T) {
	forEachSharedKind(t, sharedServersOneOrder)
}

func sharedServersOneOrder(t *testing.T, kind string) {
	ks := startShared(t, kind, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const prefix = "/shared/"
	ws := watchEvery(ctx, t, ks, prefix)
	// Puts and deletes on keys of each writer's own; writers run until
	// stopped, so server 1 dies while all of them write.
	wr := startWriters(ctx, t, ks, putDeleteWriter(prefix))
	time.Sleep(500 * time.Millisecond)
	ks[1].Kill()
	time.Sleep(200 * time.Millisecond)
	ks[1].Restart()
	time.Sleep(500 * time.Millisecond)
	acks, failed := wr.stop()
	t.Logf("acknowledged writes: %d; failed writes per server: %v", len(acks), failed)
	if failed[1] == 0 {
		t.Errorf("no write through server 1 failed: it was not killed while writers ran")
	}
	if len(acks) < 100 {
		t.Errorf("only %d writes acknowledged", len(acks))
	}

	// A last write through server 2 marks the end for every watcher.
	end, err := ks[2].Client.Put(ctx, prefix+"end", "end")
	if err != nil {
		t.Fatalf("final put: %v", err)
	}
	last := end.Header.Revision
	ws.waitFor(t, ks, last)
	checkOneOrder(t, ws.stop(), last, acks)

	checkHashKV(ctx, t, ks, last)
	// Server 0 heard of the others' commits through its driver's
	// notifications (on Postgres, its LISTEN connection).
	const received = "kite_db_notifications_received_total"
	if ms := scrape(t, ks[0].Endpoint); ms[received] == nil {
		t.Errorf("server 0 exports no %s", received)
	} else if got := value(ms, received); got < 1 {
		t.Errorf("server 0: %s = %v after the others' writes", received, got)
	}
}

// TestSharedServersLeases: a lease is one lease on every server. Granted on
// server 0, kept alive through server 1, read through server 2, a duplicate
// grant refused everywhere, revoked through server 1: its keys are deleted
// and every server agrees it is gone.
func TestSharedServersLeases(t *testing.T) {
	forEachSharedKind(t, sharedServersLeases)
}

func sharedServersLeases(t *testing.T, kind string) {
	ks := startShared(t, kind, 3)
	ctx := testCtx(t, time.Minute)
	g, err := ks[0].Client.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ks[1].Client.Put(ctx, "leased", "v", clientv3.WithLease(g.ID)); err != nil {
		t.Fatalf("put with a lease granted on another server: %v", err)
	}
	if _, err := ks[1].Client.KeepAliveOnce(ctx, g.ID); err != nil {
		t.Fatalf("keep-alive on another server: %v", err)
	}
	ttl, err := ks[2].Client.TimeToLive(ctx, g.ID, clientv3.WithAttachedKeys())
	if err != nil || ttl.TTL <= 0 || len(ttl.Keys) != 1 {
		t.Fatalf("TimeToLive on a third server = %+v, %v; want the lease with one key", ttl, err)
	}
	if _, err := ks[2].Lease.LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: int64(g.ID), TTL: 30}); err == nil {
		t.Fatal("granting an existing lease ID through another server succeeded")
	}
	for i, k := range ks {
		ls, err := k.Client.Leases(ctx)
		if err != nil || len(ls.Leases) != 1 || ls.Leases[0].ID != g.ID {
			t.Errorf("Leases on server %d = %+v, %v", i, ls, err)
		}
	}
	// Kept alive through server 0 for longer than the TTL of a second
	// lease: every server's clock follows, whichever runs expiry.
	g2, err := ks[1].Client.Grant(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if _, err := ks[0].Client.KeepAliveOnce(ctx, g2.ID); err != nil {
			t.Fatalf("keep-alive through server 0: %v", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	for i, k := range ks {
		ttl, err := k.Client.TimeToLive(ctx, g2.ID)
		if err != nil || ttl.TTL < 1 {
			t.Errorf("TimeToLive on server %d of a lease kept alive through server 0: TTL %d, %v; want TTL >= 1", i, ttlOf(ttl), err)
		}
		if _, err := k.Client.KeepAliveOnce(ctx, g2.ID); err != nil {
			t.Errorf("keep-alive through server %d of a lease kept alive through server 0: %v", i, err)
		}
	}
	if _, err := ks[0].Client.Revoke(ctx, g2.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := ks[1].Client.Revoke(ctx, g.ID); err != nil {
		t.Fatalf("revoke through another server: %v", err)
	}
	for i, k := range ks {
		resp, err := k.Client.Get(ctx, "leased")
		if err != nil || len(resp.Kvs) != 0 {
			t.Errorf("server %d after revoke: %+v, %v; want the key gone", i, resp, err)
		}
		ttl, err := k.Client.TimeToLive(ctx, g.ID)
		if err != nil || ttl.TTL != -1 {
			t.Errorf("TimeToLive on server %d after revoke: TTL %d, %v; want TTL -1", i, ttlOf(ttl), err)
		}
	}
}

// primaryOf returns the index of the server whose log says it became
// primary (the servers must log at info level), waiting up to wait.
func primaryOf(t *testing.T, ks []*kiteProcess, wait time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		for i, k := range ks {
			if strings.Contains(k.log.Tail(1<<20), "primary=true") {
				return i
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no server became primary in %v", wait)
	return -1
}

// ttlOf reads a TimeToLive answer's TTL (clientv3's response prints as its
// header only).
func ttlOf(r *clientv3.LeaseTimeToLiveResponse) int64 {
	if r == nil {
		return 0
	}
	return r.TTL
}

// TestSharedServersLeaseExpiryFailover: lease expiry runs on one server; when
// it dies another takes over and expires the leases, deleting their keys.
//
// How soon the survivor takes over depends on the driver: on Postgres the
// primary holds a session-level advisory lock on a connection of its own,
// released as soon as the dead server's session ends; on MySQL the primary
// is chosen by a lease row in the database, which expires some seconds
// (about 6) after its holder stops renewing it. The deadlines below leave
// room for the slower of the two.
func TestSharedServersLeaseExpiryFailover(t *testing.T) {
	forEachSharedKind(t, sharedServersLeaseExpiryFailover)
}

func sharedServersLeaseExpiryFailover(t *testing.T, kind string) {
	ks := startShared(t, kind, 2, "--log-level", "info")
	const takeover = 30 * time.Second
	ctx := testCtx(t, 2*time.Minute)
	p := primaryOf(t, ks, takeover)
	other := ks[1-p]
	// Granted and kept alive through the server that is not primary, then
	// the primary dies: the survivor must take over and expire the lease.
	g, err := other.Client.Grant(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Client.Put(ctx, "expiring", "v", clientv3.WithLease(g.ID)); err != nil {
		t.Fatal(err)
	}
	// Kept alive through the server that does not run expiry for twice its
	// TTL: the renewals must reach the primary.
	for range 8 {
		if _, err := other.Client.KeepAliveOnce(ctx, g.ID); err != nil {
			t.Fatalf("keep-alive: %v", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if resp, err := other.Client.Get(ctx, "expiring"); err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("key of a lease kept alive through a non-primary server: %+v, %v; want it present", resp, err)
	}
	ks[p].Kill()
	deadline := time.Now().Add(takeover)
	for {
		resp, err := other.Client.Get(ctx, "expiring")
		if err == nil && len(resp.Kvs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("key of a 2 s lease still present %v after the other server died: %+v, %v", takeover, resp, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestSharedServersStoppedPeer: a server that stops reading (SIGSTOP: its
// database connections, the one it hears of the others' commits on
// included, and everything else frozen) never stalls another server's
// writes, and when it resumes its watchers catch up with no gap.
func TestSharedServersStoppedPeer(t *testing.T) {
	forEachSharedKind(t, sharedServersStoppedPeer)
}

func sharedServersStoppedPeer(t *testing.T, kind string) {
	ks := startShared(t, kind, 2)
	ctx := testCtx(t, 2*time.Minute)
	const prefix = "/stopped/"
	ws := watchEvery(ctx, t, ks[1:], prefix)
	time.Sleep(200 * time.Millisecond) // the watch is established

	if err := ks[1].proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = ks[1].proc.Signal(syscall.SIGCONT)
		}
	}
	defer resume()
	const writes = 1000
	var last int64
	for i := range writes {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := ks[0].Client.Put(wctx, fmt.Sprintf("%sk%d", prefix, i%50), fmt.Sprint(i))
		cancel()
		if err != nil {
			t.Fatalf("write %d through server 0 while server 1 is stopped: %v", i, err)
		}
		last = resp.Header.Revision
	}
	resume()
	ws.waitFor(t, ks[1:], last)
	seen := ws.stop()[0]
	if len(seen) != writes || seen[len(seen)-1].Rev != last || seen[0].Rev != last-writes+1 {
		t.Fatalf("resumed watcher saw %d events, revisions %d..%d; want %d events ending at %d",
			len(seen), seen[0].Rev, seen[len(seen)-1].Rev, writes, last)
	}
	for i := 1; i < len(seen); i++ {
		if seen[i].Rev != seen[i-1].Rev+1 {
			t.Fatalf("gap in the resumed watcher's events: %d then %d", seen[i-1].Rev, seen[i].Rev)
		}
	}
}

// TestSharedServersAlarm: a NOSPACE alarm raised through one server is seen
// by the other, which refuses writes too; disarmed through the other, both
// accept writes again.
func TestSharedServersAlarm(t *testing.T) {
	forEachSharedKind(t, sharedServersAlarm)
}

func sharedServersAlarm(t *testing.T, kind string) {
	ks := startShared(t, kind, 2, "--quota-backend-bytes=2000000")
	ctx := testCtx(t, time.Minute)
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		// Random, so that the database cannot compress it away (Postgres
		// compresses large values; random bytes keep their size anywhere).
		big := make([]byte, 150_000)
		for j := range big {
			big[j] = byte(rand.Uint32())
		}
		_, err = ks[0].Client.Put(ctx, fmt.Sprintf("big%d", i), string(big))
	}
	if !errors.Is(err, rpctypes.ErrNoSpace) {
		t.Fatalf("filling the quota through server 0 ended with %v; want %v", err, rpctypes.ErrNoSpace)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		alarms, err := ks[1].Client.AlarmList(ctx)
		if err == nil && len(alarms.Alarms) == 1 && alarms.Alarms[0].Alarm == pb.AlarmType_NOSPACE {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("server 1 does not list the NOSPACE alarm raised through server 0: %+v, %v", alarms, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := ks[1].Client.Put(ctx, "small", "v"); !errors.Is(err, rpctypes.ErrNoSpace) {
		t.Fatalf("put through server 1 under the alarm: %v; want %v", err, rpctypes.ErrNoSpace)
	}
	if _, err := ks[1].Client.Delete(ctx, "big", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	if _, err := ks[1].Client.Compact(ctx, mustRev(t, ks[1]), clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	// As with etcd: compact, defragment, then disarm.
	if _, err := ks[1].Client.Defragment(ctx, ks[1].Endpoint); err != nil {
		t.Fatalf("defragment: %v", err)
	}
	if st, err := ks[0].Client.Status(ctx, ks[0].Endpoint); err != nil || st.DbSize >= 2_000_000 {
		t.Fatalf("database size after compaction and defragment: %+v, %v; want below the quota", st, err)
	}
	alarms, err := ks[1].Client.AlarmList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range alarms.Alarms {
		if _, err := ks[1].Client.AlarmDisarm(ctx, (*clientv3.AlarmMember)(a)); err != nil {
			t.Fatal(err)
		}
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		_, err := ks[0].Client.Put(ctx, "after", "v")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			st, serr := ks[0].Client.Status(ctx, ks[0].Endpoint)
			t.Fatalf("put through server 0 after the alarm was disarmed through server 1: %v (status %+v, %v)", err, st, serr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func mustRev(t *testing.T, k *kiteProcess) int64 {
	t.Helper()
	resp, err := k.Client.Get(testCtx(t, 10*time.Second), "any")
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}
