package main

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// writeLabelSuffix names the row of list-under-writes' writer.
const writeLabelSuffix = "/write"

// runListUnderWrites: list's full paginated list, by s.clients clients,
// while one writer puts keys of the workload's own prefix at --write-rate.
// kube-apiserver lists while controllers write; a store whose long reads
// and writes contend (a snapshot held open across pages, one writer)
// shows it here and not in list or put alone, on both sides: the lists
// slow down, or the writes wait behind them. So it reports two rows: the
// lists under the workload's label, the writes under LABEL/write.
func runListUnderWrites(ctx context.Context, e *env, s spec) ([]result, error) {
	if err := e.ensureData(ctx); err != nil {
		return nil, err
	}
	// The connection the next client would use: with enough connections
	// the writes do not queue on a list's gRPC channel in this process.
	w := startPacedWriter(ctx, e, s.label, e.conn(s.clients), e.prefix(s.label), e.cfg.writeRate)
	// The lists start once a write has been answered, so that every list
	// runs with the writer going, not the first ones alone.
	select {
	case <-w.first:
	case <-ctx.Done():
	}
	out := closedLoop(ctx, e, s.label, s.clients, pagedList(e))
	writes := w.stop()
	return []result{
		out.result(e, s),
		writes.result(e, spec{name: s.name, label: s.label + writeLabelSuffix, clients: 1}),
	}, nil
}

// pacedWriter puts keys one at a time at a fixed rate in its own goroutine
// until stopped.
type pacedWriter struct {
	stopCh chan struct{} // closed by stop
	first  chan struct{} // closed when the first write has been answered
	done   chan struct{} // closed when the goroutine has returned
	out    outcome       // the goroutine's; read after done
}

// startPacedWriter starts a writer that puts --val-size values to the keys
// of a --keys key space under prefix, in turn, one every 1/rate seconds
// (back to back when rate is 0). A writer that falls behind catches up
// without waiting, so the rate is what the server was offered.
func startPacedWriter(ctx context.Context, e *env, label string, kv clientv3.KV, prefix string, rate float64) *pacedWriter {
	w := &pacedWriter{stopCh: make(chan struct{}), first: make(chan struct{}), done: make(chan struct{})}
	var interval time.Duration
	if rate > 0 {
		interval = time.Duration(float64(time.Second) / rate)
	}
	value := makeValue(e.cfg.valSize, 10)
	go func() {
		defer close(w.done)
		start := time.Now()
		defer func() { w.out.elapsed = time.Since(start) }()
		for seq := 0; ; seq++ {
			if seq > 0 && !w.wait(ctx, time.Until(start.Add(time.Duration(seq)*interval))) {
				return
			}
			// Not cut by stop: a write in flight when the lists end is
			// answered and counted, so a run never ends without a write.
			opCtx, opCancel := context.WithTimeout(ctx, e.cfg.OpTimeout)
			k := key(prefix, seq%e.cfg.keys)
			t0 := time.Now()
			_, err := kv.Put(opCtx, k, value)
			d := time.Since(t0)
			opCancel()
			switch {
			case err == nil:
				w.out.hist.Record(d)
			case ctx.Err() != nil:
				// Interrupted: not an answer from the server.
			default:
				w.out.errors++
				if w.out.firstErr == "" {
					w.out.firstErr = fmt.Sprintf("put %s: %v", k, err)
					e.log.Warn("operation failed", "target", e.t.name, "workload", label+writeLabelSuffix, "error", err)
				}
			}
			if seq == 0 {
				close(w.first)
			}
		}
	}()
	return w
}

// wait sleeps d (nothing when d is not positive) and reports whether the
// writer should go on: false once stopped or ctx is done.
func (w *pacedWriter) wait(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		select {
		case <-w.stopCh:
			return false
		case <-ctx.Done():
			return false
		default:
			return true
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-w.stopCh:
		return false
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// stop ends the writer after the write in flight and returns what it
// measured.
func (w *pacedWriter) stop() *outcome {
	close(w.stopCh)
	<-w.done
	w.out.ops = int64(w.out.hist.Count())
	return &w.out
}
