package test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kite-db/kite/internal/testenv"
	"github.com/kite-db/kite/pkg/drivers/mysql/mysqltest"
	"github.com/kite-db/kite/pkg/drivers/postgres/pgtest"
)

// TestFailoverLostHistoryEndToEnd is what a client of two kite servers sees
// when an asynchronous standby (Postgres) or replica (MySQL) that lagged is
// promoted: the database now ends before revisions both servers had
// acknowledged and sent to watchers. Every server must stop serving it
// rather than number those revisions again: writes and reads fail with
// etcd's CORRUPT error, watch streams end with it (a kube-apiserver watch
// cache must not wait on as if its history were the storage's), /readyz
// fails, and `etcdctl alarm list` names the CORRUPT alarm. The drivers'
// own tests cover the storage side (pkg/drivers/postgres's failover tests,
// pkg/drivers/mysql's TestHistoryLost); this one covers what crosses the
// gRPC and HTTP boundary.
func TestFailoverLostHistoryEndToEnd(t *testing.T) {
	t.Run("postgres", func(t *testing.T) {
		pair := pgtest.NewPair(t, false)
		lostHistoryEndToEnd(t, pair.URL(), func() {
			pair.Standby.Stop(t, "immediate")
		}, func() {
			pair.Primary.Stop(t, "immediate")
			pair.Standby.Start(t)
			pair.Standby.Promote(t)
		})
	})
	t.Run("mysql", func(t *testing.T) {
		// kite's DSN names the forwarder, as it would name a virtual IP
		// in front of the primary.
		pair := mysqltest.NewPair(t)
		fw := newForwarder(t, pair.Primary().Addr())
		dsn := "mysql://root@tcp(" + fw.Addr() + ")/kite"
		lostHistoryEndToEnd(t, dsn, func() {
			pair.PauseReplication(t)
		}, func() {
			pair.Promote(t)
			fw.moveTo(pair.Replica().Addr())
		})
	})
}

// lostHistoryEndToEnd runs two kite servers on dsn with a writer each,
// lags the replica (lag: it stops receiving while the primary goes on
// acknowledging), fails over to it (failover: the primary dies and the
// replica is promoted behind dsn), and checks what the clients see.
func lostHistoryEndToEnd(t *testing.T, dsn string, lag, failover func()) {
	ks := []*kiteProcess{
		startKiteIn(t, t.TempDir(), "--datastore-endpoint", dsn),
		startKiteIn(t, t.TempDir(), "--datastore-endpoint", dsn),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const prefix = "/failover/"

	// Each watch is read from the start, as a client reads it: clientv3
	// drops the error that ends a watch if it is not taken within 250 ms.
	watchEnds := make([]chan error, len(ks))
	for i, k := range ks {
		wc := k.Client.Watch(ctx, prefix, clientv3.WithPrefix())
		watchEnds[i] = make(chan error, 1)
		go func() { watchEnds[i] <- watchEnd(ctx, wc) }()
	}
	// One writer per server, each request with its own deadline, until
	// stopped; the last error each saw is kept.
	var (
		acked   atomic.Int64
		mu      sync.Mutex
		lastErr = make([]error, len(ks))
		stop    = make(chan struct{})
		wg      sync.WaitGroup
	)
	for i, k := range ks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
				_, err := k.Client.Put(wctx, fmt.Sprintf("%ss%d/%06d", prefix, i, n), "v")
				wcancel()
				mu.Lock()
				lastErr[i] = err
				mu.Unlock()
				if err == nil {
					acked.Add(1)
				} else {
					time.Sleep(50 * time.Millisecond)
				}
			}
		}()
	}
	halt := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer halt()
	waitUntil(t, 30*time.Second, "writes through both servers", func() bool { return acked.Load() > 50 })

	// The replica stops receiving while the primary goes on acknowledging,
	// then the primary dies and the lagging replica is promoted.
	lag()
	before := acked.Load()
	waitUntil(t, 30*time.Second, "writes the replica never got", func() bool { return acked.Load() > before+100 })
	failover()

	for i := range ks {
		waitUntil(t, 30*time.Second, fmt.Sprintf("server %d refusing writes with CORRUPT", i), func() bool {
			mu.Lock()
			defer mu.Unlock()
			return errors.Is(lastErr[i], rpctypes.ErrCorrupt)
		})
	}
	halt()

	for i, k := range ks {
		// The watch ends with the error instead of waiting on.
		if err := <-watchEnds[i]; !errors.Is(err, rpctypes.ErrCorrupt) {
			t.Errorf("server %d: watch ended with %v, want %v", i, err, rpctypes.ErrCorrupt)
		}
		// A new watch is refused too.
		w := k.Client.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(1))
		if err := watchEnd(ctx, w); !errors.Is(err, rpctypes.ErrCorrupt) {
			t.Errorf("server %d: a new watch ended with %v, want %v", i, err, rpctypes.ErrCorrupt)
		}
		if _, err := k.Client.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithSerializable()); !errors.Is(err, rpctypes.ErrCorrupt) {
			t.Errorf("server %d: serializable read: %v, want %v", i, err, rpctypes.ErrCorrupt)
		}
		code, body := httpGet(t, k.Endpoint+"/readyz?verbose")
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "[-]serializable_read failed") {
			t.Errorf("server %d: /readyz answered %d %q, want 503 naming the failed read", i, code, body)
		}
		out, err := ctl(t, k.Endpoint, "", "alarm", "list")
		if err != nil || !strings.Contains(out, "alarm:CORRUPT") {
			t.Errorf("server %d: etcdctl alarm list: %q, %v; want the CORRUPT alarm", i, out, err)
		}
	}

	// A server started now has no memory of what was served: only the
	// database's record of where kite's writes went can refuse it.
	lateServerRefuses(t, dsn)

	// The operator accepts the loss and restarts every server: they serve
	// the database as it is.
	out, err := kiteCmd(ctx, "datastore", "accept-history", "--datastore-endpoint", dsn)
	if err != nil || !strings.Contains(out, "accepted: ") {
		t.Fatalf("kite datastore accept-history: %v\n%s", err, out)
	}
	t.Logf("accept-history: %s", strings.TrimSpace(out))
	for i, k := range ks {
		k.Kill()
		k.Restart()
		if _, err := k.Client.Put(ctx, fmt.Sprintf("%saccepted-%d", prefix, i), "v"); err != nil {
			t.Errorf("server %d after accept-history and a restart: %v", i, err)
		}
	}
}

// lateServerRefuses starts a kite server on dsn with a fresh data dir and
// waits until it logs that it refuses the database.
func lateServerRefuses(t *testing.T, dsn string) {
	t.Helper()
	ep := "http://127.0.0.1:" + strconv.Itoa(freePort(t))
	log := &syncBuffer{}
	p, err := testenv.Start(testenv.Command{Argv: []string{kiteBin, "--name", "late", "--data-dir", t.TempDir(),
		"--listen-client-urls", ep, "--advertise-client-urls", ep, "--log-level", "warn", "--datastore-endpoint", dsn}, Out: log})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	waitUntil(t, 30*time.Second, "a server started after the failover refusing the database", func() bool {
		return strings.Contains(log.Tail(1<<20), "refusing the database")
	})
}

// watchEnd drains a watch channel until it closes and returns the error of
// its last response (nil if it closed without one).
func watchEnd(ctx context.Context, wc clientv3.WatchChan) error {
	var err error
	for {
		select {
		case resp, ok := <-wc:
			if !ok {
				return err
			}
			if resp.Err() != nil {
				err = resp.Err()
			}
		case <-ctx.Done():
			return fmt.Errorf("watch still open: %w", ctx.Err())
		}
	}
}

func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
