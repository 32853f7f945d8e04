//go:build unix

package test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kite-db/kite/pkg/drivers/mysql/mysqltest"
)

// TestGalera: three kite servers, each on its own node of a 3-node MariaDB
// Galera cluster (mysqltest.NewGalera), all writing at once, so their
// write transactions collide at certification; then a Galera node
// SIGKILLed and restarted under load, then a kite server SIGKILLed and
// restarted. Every acknowledged write is in one dense event order that the
// watcher on every server sees identically, no request is applied twice,
// HashKV agrees, no client ever got anything but etcd's retryable errors
// (never a certification failure as such), and porcupine finds gets, puts
// and compare-and-swaps through the three servers linearizable.
func TestGalera(t *testing.T) {
	g := mysqltest.NewGalera(t, 3)
	ks := make([]*kiteProcess, 3)
	for i := range ks {
		ks[i] = startKiteIn(t, t.TempDir(), "--datastore-endpoint", "mysql://"+g.DSN(i)+"kite")
	}
	t.Run("OneOrderUnderFaults", func(t *testing.T) { galeraOneOrder(t, g, ks) })
	t.Run("Linearizable", func(t *testing.T) { checkLinearizable(t, ks) })
}

func galeraOneOrder(t *testing.T, g *mysqltest.Galera, ks []*kiteProcess) {
	ctx := testCtx(t, 3*time.Minute)
	const prefix = "/galera/"
	ws := watchEvery(ctx, t, ks, prefix)
	codesSeen := newCodeCount()
	write := putDeleteWriter(prefix)
	wr := startWriters(ctx, t, ks, func(ctx context.Context, c *clientv3.Client, i, n int) (ack, error) {
		a, err := write(ctx, c, i, n)
		codesSeen.add(err)
		return a, err
	})

	// Every server writes through its own node: their transactions all
	// take the one revision row, so they conflict at certification.
	time.Sleep(2 * time.Second)
	conflicts := 0.0
	for _, k := range ks {
		conflicts += value(scrape(t, k.Endpoint), "kite_write_conflicts_total")
	}
	t.Logf("before the faults: %d writes acknowledged, %v write batches applied again after losing certification, failures %v",
		len(wr.acks), conflicts, codesSeen.snapshot())
	if conflicts == 0 {
		t.Errorf("three servers writing through three nodes had no certification conflict: the retry was not exercised")
	}
	for code, n := range codesSeen.snapshot() {
		if code != codes.Unavailable {
			t.Errorf("%d writes failed with %v with no fault injected (the first: %v): a lost certification must be retried inside kite, and only a write that lost every attempt answered Unavailable", n, code, codesSeen.example(code))
		}
	}

	// A Galera node dies under load: its kite server answers Unavailable
	// until the node is back; the others go on once the cluster has
	// noticed (its suspect timeout).
	g.Kill(t, 2)
	time.Sleep(3 * time.Second)
	g.Start(t, 2)
	time.Sleep(time.Second)

	// A kite server dies under load.
	ks[1].Kill()
	time.Sleep(200 * time.Millisecond)
	ks[1].Restart()
	time.Sleep(time.Second)

	acks, failed := wr.stop()
	t.Logf("acknowledged writes: %d; failed writes per server: %v; by code: %v", len(acks), failed, codesSeen.snapshot())
	for code, n := range codesSeen.snapshot() {
		if code != codes.Unavailable && code != codes.DeadlineExceeded {
			t.Errorf("%d writes failed with %v (the first: %v); want only etcd's retryable Unavailable (or a client deadline)", n, code, codesSeen.example(code))
		}
	}
	if failed[1] == 0 {
		t.Errorf("no write through server 1 failed: it was not killed while writers ran")
	}

	end, err := ks[0].Client.Put(ctx, prefix+"end", "end")
	if err != nil {
		t.Fatalf("final put: %v", err)
	}
	last := end.Header.Revision
	ws.waitFor(t, ks, last)
	events := ws.stop()
	checkOneOrder(t, events, last, acks)
	// Each value is sent once: a value twice in the log is a transaction
	// committed although kite was told it lost, and applied again.
	seen := map[string]int64{}
	for _, ev := range events[0] {
		if ev.Value == "" {
			continue
		}
		if rev, ok := seen[ev.Value]; ok {
			t.Errorf("value %q written at revisions %d and %d: one request applied twice", ev.Value, rev, ev.Rev)
		}
		seen[ev.Value] = ev.Rev
	}
	checkHashKV(ctx, t, ks, last)
}

// codeCount counts failed requests by gRPC code and keeps the first
// error of each, so that a failure names what the client was told.
type codeCount struct {
	mu    sync.Mutex
	n     map[codes.Code]int
	first map[codes.Code]error
}

func newCodeCount() *codeCount {
	return &codeCount{n: map[codes.Code]int{}, first: map[codes.Code]error{}}
}

func (c *codeCount) add(err error) {
	if err == nil {
		return
	}
	code := status.Code(err)
	if errors.Is(err, context.DeadlineExceeded) {
		code = codes.DeadlineExceeded
	}
	c.mu.Lock()
	c.n[code]++
	if c.first[code] == nil {
		c.first[code] = err
	}
	c.mu.Unlock()
}

// example is the first error seen with code.
func (c *codeCount) example(code codes.Code) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.first[code]
}

func (c *codeCount) snapshot() map[codes.Code]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[codes.Code]int, len(c.n))
	for k, v := range c.n {
		out[k] = v
	}
	return out
}

func (c *codeCount) total() int {
	n := 0
	for _, v := range c.snapshot() {
		n += v
	}
	return n
}

// String makes a failure message name the codes.
func (c *codeCount) String() string { return fmt.Sprint(c.snapshot()) }
