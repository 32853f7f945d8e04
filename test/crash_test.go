package test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

type ackedPut struct {
	key, value string
	rev        int64
}

// TestCrashDurability: kite is SIGKILLed while 8 clients write; after a
// restart on the same data dir every acknowledged write is there, and the
// history is exactly revisions 2..current, each used once.
func TestCrashDurability(t *testing.T) {
	k := startKite(t)
	var (
		mu    sync.Mutex
		acked []ackedPut
		wg    sync.WaitGroup
	)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cli, err := newClient(k.Endpoint)
			if err != nil {
				t.Errorf("writer %d: %v", w, err)
				return
			}
			defer cli.Close()
			for i := 0; ctx.Err() == nil && i < 100000; i++ {
				key, val := fmt.Sprintf("crash/%d/%06d", w, i), fmt.Sprintf("v%d-%d", w, i)
				cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				r, err := cli.Put(cctx, key, val)
				cancel()
				if err != nil {
					continue // unacknowledged: may or may not be there
				}
				mu.Lock()
				acked = append(acked, ackedPut{key, val, r.Header.Revision})
				mu.Unlock()
			}
		}()
	}
	// Kill once writes are flowing.
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		if n >= 200 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second)
	k.Kill()
	time.Sleep(200 * time.Millisecond)
	stop()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(acked) < 200 {
		t.Fatalf("only %d writes acknowledged before the kill", len(acked))
	}
	t.Logf("%d acknowledged writes before SIGKILL", len(acked))

	k.Restart()
	cctx := testCtx(t, 60*time.Second)
	cur, err := k.Client.Get(cctx, "crash/", clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("get after restart: %v", err)
	}
	got := map[string]ackedPut{}
	for _, kv := range cur.Kvs {
		got[string(kv.Key)] = ackedPut{string(kv.Key), string(kv.Value), kv.ModRevision}
	}
	revs := map[int64]string{}
	for _, a := range acked {
		g, ok := got[a.key]
		if !ok {
			t.Errorf("acknowledged put %s (revision %d) lost", a.key, a.rev)
			continue
		}
		if g != a {
			t.Errorf("acknowledged put %+v, after restart %+v", a, g)
		}
		if other, dup := revs[a.rev]; dup {
			t.Errorf("revision %d acknowledged for two puts: %s and %s", a.rev, other, a.key)
		}
		revs[a.rev] = a.key
	}
	// Every key is written once, so the history is one put per revision.
	head := cur.Header.Revision
	if want := int64(len(cur.Kvs)) + 1; head != want {
		t.Errorf("revision %d after restart with %d keys (one put each): want %d", head, len(cur.Kvs), want)
	}
	seen := watchHistory(t, k.Client, "crash/", 1, head)
	for rev := int64(2); rev <= head; rev++ {
		if n := len(seen[rev]); n != 1 {
			t.Errorf("revision %d has %d events in the replayed history, want 1", rev, n)
		}
	}
	for _, a := range acked {
		if evs := seen[a.rev]; len(evs) != 1 || evs[0] != a.key {
			t.Errorf("history at revision %d: %v, want the acknowledged put of %s", a.rev, evs, a.key)
		}
	}
	// Writable again, at the next revision.
	r, err := k.Client.Put(cctx, "after-crash", "x")
	if err != nil {
		t.Fatalf("put after restart: %v", err)
	}
	if r.Header.Revision != head+1 {
		t.Errorf("first put after restart at revision %d, want %d", r.Header.Revision, head+1)
	}
}

// watchHistory replays [from, to] under prefix and returns the keys of the
// events at each revision; it fails the test on a revision out of order.
func watchHistory(t *testing.T, cli *clientv3.Client, prefix string, from, to int64) map[int64][]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	wc := cli.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(from), clientv3.WithPrevKV())
	seen := map[int64][]string{}
	var last int64
	for wr := range wc {
		if err := wr.Err(); err != nil {
			t.Fatalf("replay watch: %v", err)
		}
		for _, ev := range wr.Events {
			rev := ev.Kv.ModRevision
			if rev < last {
				t.Fatalf("replay: revision %d after %d", rev, last)
			}
			last = rev
			seen[rev] = append(seen[rev], string(ev.Kv.Key))
		}
		if last >= to {
			return seen
		}
	}
	t.Fatalf("replay watch ended at revision %d before %d: %v", last, to, ctx.Err())
	return nil
}
