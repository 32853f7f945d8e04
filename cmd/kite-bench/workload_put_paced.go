package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// maxPacedInFlight bounds the puts put-paced has outstanding: a server
// stalled for longer than maxPacedInFlight intervals is not offered more,
// and the puts it was not offered are counted as errors, so a stall can
// neither hide nor exhaust the benchmark's memory.
const maxPacedInFlight = 1024

// runPutPaced: puts offered at a fixed rate (--paced-rate) in an open loop, each in its own goroutine, for --duration or
// --total puts. A closed loop hides a stall: its one client waits through
// it and the stall costs one slow answer. Writers that do not wait for
// each other (kube-apiserver's controllers) all meet it, so here a put's
// latency runs from the moment it was due to its answer, and every put
// due during a stall counts the stall. Its p99 is what a paced
// kube-apiserver update sees of the storage's hiccups (checkpoints,
// flushes, fsyncs on a shared disk), which throughput hides.
func runPutPaced(ctx context.Context, e *env, s spec) (result, error) {
	rate := e.cfg.pacedRate
	if rate <= 0 {
		return result{}, errors.New("put-paced needs a positive --paced-rate")
	}
	interval := time.Duration(float64(time.Second) / rate)
	runCtx, cancel := ctx, context.CancelFunc(func() {})
	if e.cfg.duration > 0 {
		runCtx, cancel = context.WithTimeout(ctx, e.cfg.duration)
	}
	defer cancel()

	prefix := e.prefix(s.label)
	value := makeValue(e.cfg.valSize, 11)
	var (
		mu       sync.Mutex
		out      outcome
		inFlight = make(chan struct{}, maxPacedInFlight)
		wg       sync.WaitGroup
	)
	record := func(d time.Duration, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err == nil {
			out.hist.Record(d)
			return
		}
		out.errors++
		if out.firstErr == "" {
			out.firstErr = err.Error()
			e.log.Warn("operation failed", "target", e.t.name, "workload", s.label, "error", err)
		}
	}
	begin := time.Now()
	for seq := 0; e.cfg.total <= 0 || int64(seq) < e.cfg.total; seq++ {
		due := begin.Add(time.Duration(seq) * interval)
		if !sleepUntil(runCtx, due) {
			break
		}
		select {
		case inFlight <- struct{}{}:
		default:
			record(0, fmt.Errorf("put %d not offered: %d puts outstanding", seq, maxPacedInFlight))
			continue
		}
		kv := e.conn(seq) // spread over the connections
		k := key(prefix, seq%e.cfg.keys)
		wg.Go(func() {
			defer func() { <-inFlight }()
			// Not cut by the end of the run: a put offered is answered and counted.
			opCtx, opCancel := context.WithTimeout(ctx, e.cfg.OpTimeout)
			defer opCancel()
			_, err := kv.Put(opCtx, k, value)
			if err != nil && ctx.Err() != nil {
				return // interrupted: not an answer from the server
			}
			if err != nil {
				err = fmt.Errorf("put %s: %w", k, err)
			}
			record(time.Since(due), err)
		})
	}
	wg.Wait()
	out.elapsed = time.Since(begin)
	out.ops = int64(out.hist.Count())
	return out.result(e, s), nil
}

// sleepUntil waits until t and reports whether the run goes on.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}
