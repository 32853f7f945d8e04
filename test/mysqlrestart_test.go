//go:build unix

package test

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kite-db/kite/pkg/drivers/mysql/mysqltest"
)

// TestMySQLRestartUnderLoad is TestPostgresRestartUnderLoad on MariaDB:
// two kite servers on one database of a private mariadbd
// (mysqltest.NewServer), writers and a watcher on each, and mariadbd
// restarted twice mid-run: an orderly shutdown (SIGTERM: the server ends
// the sessions itself, as a service restart does) and then a crash
// (SIGKILL: connections drop mid-statement, and InnoDB's crash recovery
// must bring back every acknowledged commit). Afterwards every
// acknowledged write is stored at its revision, requests failed only
// while mariadbd was down and succeed again after, and each watcher's
// event sequence is the same dense sequence on both servers. Through all
// of it, at debug level, neither server logs the database password, which
// here is a real one: kite connects as a user created with it.
func TestMySQLRestartUnderLoad(t *testing.T) {
	if againstEtcd {
		t.Skip("the database is MariaDB")
	}
	db := mysqltest.NewServer(t, "")
	const password = "r3start-s3cret"
	db.Exec(t, "CREATE USER 'kite'@'%' IDENTIFIED BY '"+password+"'", "GRANT ALL ON *.* TO 'kite'@'%'")
	dsn := "mysql://kite:" + password + "@tcp(" + db.Addr() + ")/kite"
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
	const prefix = "/mysqlrestart/"

	ws := watchEvery(ctx, t, ks, prefix)
	wr := startWriters(ctx, t, ks, func(ctx context.Context, c *clientv3.Client, i, n int) (ack, error) {
		key, value := fmt.Sprintf("%ss%d/k%03d", prefix, i, n%100), fmt.Sprintf("v%d-%d", i, n)
		resp, err := c.Put(ctx, key, value)
		if err != nil {
			// Unavailable (retryable) while mariadbd is down; a client
			// deadline if the server was waiting for it.
			if code := status.Code(err); code != codes.Unavailable && code != codes.DeadlineExceeded {
				t.Errorf("server %d: a write failed during the restart with %v; want Unavailable", i, err)
			}
			return ack{}, err
		}
		return ack{key, value, resp.Header.Revision}, nil
	})
	var failedBy []int
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		time.Sleep(time.Second)
		before := wr.failures()
		db.Restart(t, sig)
		time.Sleep(2 * time.Second)
		failedBy = append(failedBy, wr.failures()-before)
	}
	acks, failed := wr.stop()
	t.Logf("acknowledged writes: %d; failed writes per server: %v; failed in the SIGTERM and SIGKILL restarts: %v", len(acks), failed, failedBy)

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
	if len(acks) == 0 || failedBy[0] == 0 || failedBy[1] == 0 {
		t.Logf("mariadbd log:\n%s", db.LogTail(60))
		t.Errorf("want writes acknowledged before and after the restarts and some failing during each (acks %d, failed in each restart %v)", len(acks), failedBy)
	}
}
