package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// runMixed is a controller-like load: each client draws every operation
//
//	35% single-key get of a preloaded key
//	35% one list page (limit 500) of the preloaded keys from a random key
//	20% txn-update (the create / GuaranteedUpdate transactions)
//	10% watch-driven: put a key and wait until the shared watch delivers it,
//	    the loop a controller closes when it reacts to its own write
//
// The latency of a watch-driven operation is put plus delivery. Every
// acknowledged watch-driven put must be delivered exactly once.
func runMixed(ctx context.Context, e *env, s spec) (result, error) {
	if err := e.ensureData(ctx); err != nil {
		return result{}, err
	}
	prefix := e.prefix(s.label)
	txnPrefix, watchPrefix := prefix+"t/", prefix+"w/"
	data, dataEnd := e.dataPrefix(), clientv3.GetPrefixRangeEnd(e.dataPrefix())

	watchCtx, stopWatch := context.WithCancel(ctx)
	d := &dispatcher{pending: map[string]*delivery{}, seen: map[string]bool{}}
	ch := e.conn(0).Watch(watchCtx, watchPrefix, clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	created := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { d.run(ch, created) })
	defer wg.Wait()
	defer stopWatch()
	select {
	case <-created:
	case <-ctx.Done():
		return result{}, ctx.Err()
	case <-time.After(30 * time.Second):
		return result{}, errors.New("watch not created after 30s")
	}

	out := closedLoop(ctx, e, s.label, s.clients, func(i int) opFunc {
		kv := e.conn(i)
		rng := rand.New(rand.NewPCG(uint64(i), 6))
		u := newUpdater(kv, txnPrefix, i, s.clients, e.cfg.keys, makeValue(e.cfg.valSize, uint64(7+i)))
		value := makeValue(e.cfg.valSize, 8)
		n := 0
		return func(ctx context.Context) error {
			switch r := rng.IntN(100); {
			case r < 35:
				k := key(data, rng.IntN(e.cfg.keys))
				resp, err := kv.Get(ctx, k)
				if err == nil && len(resp.Kvs) != 1 {
					err = fmt.Errorf("get %s: %d keys, want 1", k, len(resp.Kvs))
				}
				return err
			case r < 70:
				_, err := kv.Get(ctx, key(data, rng.IntN(e.cfg.keys)), clientv3.WithRange(dataEnd), clientv3.WithLimit(listPageLimit))
				return err
			case r < 90:
				return u.step(ctx)
			default:
				n++
				return d.putAndAwait(ctx, kv, watchPrefix+strconv.Itoa(i)+"-"+strconv.Itoa(n), value)
			}
		}
	})
	missed := d.settle(ctx, deliveryTimeout)
	r := out.result(e, s)
	d.mu.Lock()
	r.Missed, r.Duplicates = missed, d.dups
	d.mu.Unlock()
	return r, nil
}

// dispatcher hands the events of one shared watch to the clients waiting
// for them, by key.
type dispatcher struct {
	mu      sync.Mutex
	pending map[string]*delivery // put, not yet delivered
	seen    map[string]bool      // delivered, to catch duplicates
	dups    int64
}

type delivery struct {
	done  chan struct{} // closed on delivery
	acked bool          // the put succeeded, so the event must come
}

// putAndAwait registers k before putting it, so the event cannot arrive
// unnoticed, then waits for its delivery.
func (d *dispatcher) putAndAwait(ctx context.Context, kv clientv3.KV, k, value string) error {
	dl := &delivery{done: make(chan struct{})}
	d.mu.Lock()
	d.pending[k] = dl
	d.mu.Unlock()
	if _, err := kv.Put(ctx, k, value); err != nil {
		// The put may still have been applied (a deadline says nothing about
		// that), so k stays pending but unacknowledged: its event, if it
		// comes, is consumed quietly and its absence is not a miss.
		return err
	}
	d.mu.Lock()
	dl.acked = true
	d.mu.Unlock()
	select {
	case <-dl.done:
		return nil
	case <-ctx.Done():
		// Left pending: settle decides whether it was merely slow or missed.
		return fmt.Errorf("event for %s not delivered: %w", k, ctx.Err())
	}
}

// run reads the watch until it closes.
func (d *dispatcher) run(ch clientv3.WatchChan, created chan<- struct{}) {
	var once sync.Once
	signal := func() { close(created) }
	defer once.Do(signal)
	for resp := range ch {
		if resp.Created {
			once.Do(signal)
		}
		d.mu.Lock()
		for _, ev := range resp.Events {
			k := string(ev.Kv.Key)
			if dl, ok := d.pending[k]; ok {
				close(dl.done)
				delete(d.pending, k)
				d.seen[k] = true
			} else if d.seen[k] {
				d.dups++
			}
		}
		d.mu.Unlock()
	}
}

// settle waits up to timeout for acknowledged puts still in flight when the
// run ended, and returns how many never arrived.
func (d *dispatcher) settle(ctx context.Context, timeout time.Duration) int64 {
	deadline := time.Now().Add(timeout)
	for {
		d.mu.Lock()
		var missing int64
		for _, dl := range d.pending {
			if dl.acked {
				missing++
			}
		}
		d.mu.Unlock()
		if missing == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return missing
		}
		time.Sleep(5 * time.Millisecond)
	}
}
