package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kite-db/kite/internal/latency"
)

// loadLabel is the workload name of the row that reports how fast a
// target took the shared read keys.
const loadLabel = "load"

// loadWriters is how many load transactions are in flight at once, spread
// over the connections: enough for a server that batches its commits
// (both do) to fill each batch, few enough that a million keys of 1 KiB
// never hold more than a few MiB in flight.
const loadWriters = 16

// loadTxnOps is --load-txn-ops' default, etcd's and kite's default
// --max-txn-ops: the most puts one transaction may carry on a server
// started with its defaults.
const loadTxnOps = 128

// loadTxnBytes keeps one load transaction well below both servers' default
// --max-request-bytes (1.5 MiB), keys and framing included.
const loadTxnBytes = 1 << 20

// loadProgressEvery is how often a load logs how far it is: a million keys
// take minutes, and a silent minute looks like a hang.
const loadProgressEvery = 10 * time.Second

// ensureData preloads the shared read keys once per target, outside any
// measured interval.
func (e *env) ensureData(ctx context.Context) error {
	if e.t.dataLoaded {
		return nil
	}
	_, err := e.loadData(ctx)
	return err
}

// loadData preloads the --keys shared read keys and returns the row that
// reports the load: keys loaded and keys per second. The rate is a
// measurement of its own (a cluster restored or migrated is loaded this
// way), and with --keys 1000000 the load is most of the run.
func (e *env) loadData(ctx context.Context) (result, error) {
	took, err := loadKeys(ctx, e, "read keys", e.dataPrefix(), e.cfg.keys, e.cfg.valSize)
	if err != nil {
		return result{}, fmt.Errorf("preload %d keys: %w", e.cfg.keys, err)
	}
	e.t.dataLoaded = true
	r := newResult(e.t.name, spec{name: loadLabel, label: loadLabel, clients: loadWriters}, int64(e.cfg.keys), took, &latency.Histogram{}, 0)
	e.log.Info("preloaded read keys", "target", e.t.name, "keys", e.cfg.keys, "took", took.Round(time.Millisecond), "keys_per_sec", int64(r.OpsPerSec))
	return r, nil
}

// loadBatch is how many puts of valSize bytes one load transaction carries.
// A partial server (kine) gets one put at a time: kine answers a
// transaction of puts without compares "unsupported operations in txn
// request", since kube-apiserver never sends one.
func loadBatch(cfg *config, t *target, valSize int) int {
	if t.partial {
		return 1
	}
	// 128 bytes per put covers the key and the request's framing.
	return max(1, min(cfg.loadTxnOps, loadTxnBytes/(valSize+128)))
}

// loadKeys writes the keys 0..n-1 under prefix, values of valSize bytes,
// in transactions of loadBatch puts, loadWriters of them in flight, and
// returns how long it took. what names the keys in the progress log.
// Every transaction is one raft entry; see --load-txn-ops for what its
// size does to etcd's memory.
func loadKeys(ctx context.Context, e *env, what, prefix string, n, valSize int) (time.Duration, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	batch := loadBatch(e.cfg, e.t, valSize)
	batches := (n + batch - 1) / batch
	value := makeValue(valSize, 1)
	var next, loaded atomic.Int64
	start := time.Now()
	stopProgress := e.logLoadProgress(what, n, &loaded, start)
	var wg sync.WaitGroup
	for w := range loadWriters {
		wg.Go(func() {
			kv := e.conn(w)
			ops := make([]clientv3.Op, 0, batch)
			for {
				b := int(next.Add(1) - 1)
				if b >= batches || ctx.Err() != nil {
					return
				}
				lo, hi := b*batch, min(n, (b+1)*batch)
				opCtx, opCancel := context.WithTimeout(ctx, e.cfg.OpTimeout)
				var err error
				if hi-lo == 1 {
					_, err = kv.Put(opCtx, key(prefix, lo), value)
				} else {
					ops = ops[:0]
					for i := lo; i < hi; i++ {
						ops = append(ops, clientv3.OpPut(key(prefix, i), value))
					}
					_, err = kv.Txn(opCtx).Then(ops...).Commit()
				}
				opCancel()
				if err != nil {
					cancel(fmt.Errorf("put %s to %s: %w", key(prefix, lo), key(prefix, hi-1), err))
					return
				}
				loaded.Add(int64(hi - lo))
			}
		})
	}
	wg.Wait()
	stopProgress()
	return time.Since(start), context.Cause(ctx)
}

// logLoadProgress logs, every loadProgressEvery until the returned function
// is called, how many of n keys are loaded and at what rate.
func (e *env) logLoadProgress(what string, n int, loaded *atomic.Int64, start time.Time) (stop func()) {
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(loadProgressEvery)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-tick.C:
				done := loaded.Load()
				e.log.Info("loading keys", "target", e.t.name, "what", what, "loaded", done, "of", n,
					"keys_per_sec", int64(float64(done)/time.Since(start).Seconds()))
			}
		}
	})
	return func() {
		close(quit)
		wg.Wait()
	}
}
