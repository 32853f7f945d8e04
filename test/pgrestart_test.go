package test

import (
	"context"
	"fmt"
	"strings"
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
// the same dense sequence on both servers. Through all of it, at debug
// level, neither server logs the database password.
func TestPostgresRestartUnderLoad(t *testing.T) {
	pg := startPrivatePostgres(t)
	// trust auth ignores the password: it is there to be kept out of logs.
	const password = "r3start-s3cret"
	dsn := strings.Replace(pg.DSN("postgres"), "postgres@", "postgres:"+password+"@", 1)
	ks := []*kiteProcess{
		startKiteIn(t, t.TempDir(), "--datastore-endpoint", dsn, "--log-level", "debug"),
		startKiteIn(t, t.TempDir(), "--datastore-endpoint", dsn, "--log-level", "debug"),
	}
	defer func() {
		for i, k := range ks {
			if log := k.log.Tail(64 << 20); strings.Contains(log, password) {
				t.Errorf("server %d logged the database password", i)
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const prefix = "/pgrestart/"

	ws := watchEvery(ctx, t, ks, prefix)
	wr := startWriters(ctx, t, ks, func(ctx context.Context, c *clientv3.Client, i, n int) (ack, error) {
		key, value := fmt.Sprintf("%ss%d/k%03d", prefix, i, n%100), fmt.Sprintf("v%d-%d", i, n)
		resp, err := c.Put(ctx, key, value)
		if err != nil {
			// Unavailable (retryable) while Postgres is down; a client
			// deadline if the server was waiting for it.
			if code := status.Code(err); code != codes.Unavailable && code != codes.DeadlineExceeded {
				t.Errorf("server %d: a write failed during the restart with %v; want Unavailable", i, err)
			}
			return ack{}, err
		}
		return ack{key, value, resp.Header.Revision}, nil
	})
	time.Sleep(time.Second)
	pg.Restart()
	time.Sleep(2 * time.Second)
	acks, failed := wr.stop()
	t.Logf("acknowledged writes: %d; failed writes per server: %v", len(acks), failed)

	// Both servers serve again, and one more write through each works.
	var last int64
	for i, k := range ks {
		resp, err := k.Client.Put(ctx, fmt.Sprintf("%send%d", prefix, i), "end")
		if err != nil {
			t.Fatalf("server %d after the restart: %v\nlog:\n%s", i, err, k.log.Tail(4096))
		}
		last = max(last, resp.Header.Revision)
	}
	ws.waitFor(t, ks, last)
	checkOneOrder(t, ws.stop(), last, acks)
	// And every acknowledged write is stored at its revision.
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
