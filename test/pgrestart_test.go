package test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestPostgresRestartUnderLoad: two kite servers on one Postgres, writers
// and a watcher on each, and Postgres restarted mid-run. Afterwards every
// acknowledged write is stored at its revision, requests fail only while
// the database is down and succeed again after, and each watcher's event
// sequence (resumed from its last revision if its stream was cancelled) is
// the same dense sequence on both servers.
func TestPostgresRestartUnderLoad(t *testing.T) {
	pg := startPrivatePostgres(t)
	dsn := pg.DSN("postgres")
	ks := []*kiteProcess{
		startKiteIn(t, t.TempDir(), "--datastore-endpoint", dsn),
		startKiteIn(t, t.TempDir(), "--datastore-endpoint", dsn),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const prefix = "/pgrestart/"

	watchCtx, stopWatch := context.WithCancel(ctx)
	events := make([][]seenEvent, len(ks))
	var mus [2]sync.Mutex
	var wwg sync.WaitGroup
	for i, k := range ks {
		wwg.Go(func() {
			if err := recordWatch(watchCtx, t, k.Endpoint, prefix, &events[i], &mus[i]); err != nil {
				t.Errorf("watch on server %d: %v", i, err)
			}
		})
	}

	type ack struct {
		key, value string
		rev        int64
	}
	var ackMu sync.Mutex
	var acks []ack
	var failed [2]int
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, k := range ks {
		wg.Go(func() {
			c, err := newClient(k.Endpoint)
			if err != nil {
				t.Errorf("client %d: %v", i, err)
				return
			}
			defer c.Close()
			for j := 0; ; j++ {
				select {
				case <-stop:
					return
				default:
				}
				key, value := fmt.Sprintf("%ss%d/k%03d", prefix, i, j%100), fmt.Sprintf("v%d-%d", i, j)
				wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
				resp, err := c.Put(wctx, key, value)
				wcancel()
				if err != nil {
					// Unavailable (retryable) while Postgres is down; a
					// client deadline if the server was waiting for it.
					if c := status.Code(err); c != codes.Unavailable && c != codes.DeadlineExceeded {
						t.Errorf("server %d: a write failed during the restart with %v; want Unavailable", i, err)
					}
					failed[i]++
					time.Sleep(20 * time.Millisecond)
					continue
				}
				ackMu.Lock()
				acks = append(acks, ack{key, value, resp.Header.Revision})
				ackMu.Unlock()
			}
		})
	}
	time.Sleep(time.Second)
	pg.Restart()
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()
	t.Logf("acknowledged writes: %d; failed writes per server: %v", len(acks), failed)

	// Both servers serve again, and one more write through each works.
	var last int64
	for i, k := range ks {
		resp, err := k.Client.Put(ctx, fmt.Sprintf("%send%d", prefix, i), "end")
		if err != nil {
			t.Fatalf("server %d after the restart: %v\nlog:\n%s", i, err, k.log.tail(4096))
		}
		last = max(last, resp.Header.Revision)
	}
	deadline := time.Now().Add(30 * time.Second)
	for i := range ks {
		for {
			mus[i].Lock()
			n := len(events[i])
			done := n > 0 && events[i][n-1].Rev >= last
			mus[i].Unlock()
			if done {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("server %d's watcher has not reached revision %d (has %d events)\nlog:\n%s", i, last, n, ks[i].log.tail(4096))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	stopWatch()
	wwg.Wait()

	if !slices.Equal(events[0], events[1]) {
		t.Errorf("the servers' watchers saw different sequences (%d and %d events, first difference at %d)",
			len(events[0]), len(events[1]), firstDiff(events[0], events[1]))
	}
	byRev := map[int64][]seenEvent{}
	for _, ev := range events[0] {
		byRev[ev.Rev] = append(byRev[ev.Rev], ev)
	}
	for rev := events[0][0].Rev; rev <= last; rev++ {
		if len(byRev[rev]) == 0 {
			t.Errorf("revision %d missing from the watch sequence", rev)
		}
	}
	for _, a := range acks {
		resp, err := ks[0].Client.Get(ctx, a.key, clientv3.WithRev(a.rev))
		if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != a.value || resp.Kvs[0].ModRevision != a.rev {
			t.Errorf("acknowledged write %q=%q at revision %d: stored %+v, %v", a.key, a.value, a.rev, resp, err)
		}
	}
	if len(acks) == 0 || failed[0]+failed[1] == 0 {
		t.Logf("postgres log:\n%s", pg.Log())
		t.Errorf("want writes acknowledged before and after the restart and some failing during it (acks %d, failed %v)", len(acks), failed)
	}
}
