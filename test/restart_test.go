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

// databaseRestarts is what restartUnderLoad needs of a database server of
// the test's own.
type databaseRestarts struct {
	name     string // in messages: "postgres", "mariadbd"
	dsn      string // kite's --datastore-endpoint, with password in it
	password string // must never show in kite's logs
	// restarts are run one after the other under load, each followed by
	// two seconds of writes; named in messages.
	restarts []namedRestart
	log      func() string // the server's log, shown on failure
}

type namedRestart struct {
	name string
	do   func()
}

// restartUnderLoad is TestPostgresRestartUnderLoad and
// TestMySQLRestartUnderLoad: two kite servers on db, writers and a watcher
// on each, and db's restarts mid-run. Afterwards every acknowledged write
// is stored at its revision, requests failed only while the database was
// down (Unavailable, or a client deadline) and succeed again after, some
// failed during each restart, and each watcher's event sequence (resumed
// from its last revision if its stream was cancelled) is the same dense
// sequence on both servers. Through all of it, at debug level, neither
// server logs the database password.
func restartUnderLoad(t *testing.T, db databaseRestarts) {
	ks := []*kiteProcess{
		startKiteIn(t, t.TempDir(), "--datastore-endpoint", db.dsn, "--log-level", "debug"),
		startKiteIn(t, t.TempDir(), "--datastore-endpoint", db.dsn, "--log-level", "debug"),
	}
	defer func() {
		for i, k := range ks {
			if log := k.log.Tail(64 << 20); strings.Contains(log, db.password) {
				t.Errorf("server %d logged the database password", i)
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const prefix = "/restart/"

	ws := watchEvery(ctx, t, ks, prefix)
	wr := startWriters(ctx, t, ks, func(ctx context.Context, c *clientv3.Client, i, n int) (ack, error) {
		key, value := fmt.Sprintf("%ss%d/k%03d", prefix, i, n%100), fmt.Sprintf("v%d-%d", i, n)
		resp, err := c.Put(ctx, key, value)
		if err != nil {
			// Unavailable (retryable) while the database is down; a
			// client deadline if the server was waiting for it.
			if code := status.Code(err); code != codes.Unavailable && code != codes.DeadlineExceeded {
				t.Errorf("server %d: a write failed during a restart of %s with %v; want Unavailable", i, db.name, err)
			}
			return ack{}, err
		}
		return ack{key, value, resp.Header.Revision}, nil
	})
	failedBy := map[string]int{}
	for _, r := range db.restarts {
		time.Sleep(time.Second)
		before := wr.failures()
		r.do()
		time.Sleep(2 * time.Second)
		failedBy[r.name] = wr.failures() - before
	}
	acks, failed := wr.stop()
	t.Logf("acknowledged writes: %d; failed writes per server: %v; failed in each restart: %v", len(acks), failed, failedBy)

	// Both servers serve again, and one more write through each works.
	var last int64
	for i, k := range ks {
		resp, err := k.Client.Put(ctx, fmt.Sprintf("%send%d", prefix, i), "end")
		if err != nil {
			t.Fatalf("server %d after the restarts: %v\nlog:\n%s", i, err, k.log.Tail(4096))
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
	quiet := len(acks) == 0
	for _, r := range db.restarts {
		quiet = quiet || failedBy[r.name] == 0
	}
	if quiet {
		t.Logf("%s log:\n%s", db.name, db.log())
		t.Errorf("want writes acknowledged before and after the restarts and some failing during each (acks %d, failed in each restart %v)", len(acks), failedBy)
	}
}
