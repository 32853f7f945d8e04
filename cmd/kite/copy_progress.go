package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kite-db/kite/pkg/mvcc"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

type progressTx struct {
	mvcc.WriteTx
	p *progress
}

func (t progressTx) Put(ctx context.Context, kv *mvccpb.KeyValue, sub int64) error {
	t.p.row(kv.ModRevision, len(kv.Key)+len(kv.Value))
	return t.WriteTx.Put(ctx, kv, sub)
}

func (t progressTx) Delete(ctx context.Context, key []byte, rev, sub int64) error {
	t.p.row(rev, len(key))
	return t.WriteTx.Delete(ctx, key, rev, sub)
}

// progress prints a line every interval while a copy runs: rows, keys,
// bytes, rates, and how far it is (revision or keys out of the total).
type progress struct {
	w                io.Writer
	start            time.Time
	rows, keys, byts atomic.Int64
	at               atomic.Int64 // last revision written
	total            atomic.Int64
	unit             atomic.Value // string: "revision" or "keys"
	done             chan struct{}
	wg               sync.WaitGroup
}

func newProgress(w io.Writer, every time.Duration) *progress {
	p := &progress{w: w, start: time.Now(), done: make(chan struct{})}
	p.unit.Store("")
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-p.done:
				return
			case <-t.C:
				fmt.Fprintln(p.w, p.line())
			}
		}
	}()
	return p
}

func (p *progress) setTotal(n int64, unit string) {
	p.total.Store(n)
	p.unit.Store(unit)
}

func (p *progress) row(rev int64, bytes int) {
	p.rows.Add(1)
	p.byts.Add(int64(bytes))
	p.at.Store(rev)
}

func (p *progress) line() string {
	secs := max(time.Since(p.start).Seconds(), 1e-3)
	rows, b := p.rows.Load(), p.byts.Load()
	where := ""
	switch p.unit.Load().(string) {
	case "revision":
		if t := p.total.Load(); t > 0 {
			where = fmt.Sprintf(", revision %d of %d (%.0f%%)", p.at.Load(), t, 100*float64(p.at.Load())/float64(t))
		}
	case "keys":
		if t := p.total.Load(); t > 0 {
			where = fmt.Sprintf(", %d of %d keys (%.0f%%)", p.keys.Load(), t, 100*float64(p.keys.Load())/float64(t))
		}
	}
	return fmt.Sprintf("kite copy: %d rows, %.1f MiB, %.0f rows/s, %.1f MiB/s%s",
		rows, float64(b)/(1<<20), float64(rows)/secs, float64(b)/(1<<20)/secs, where)
}

// stop ends the progress lines with a last one, if anything was written.
func (p *progress) stop() {
	close(p.done)
	p.wg.Wait()
	if p.rows.Load() > 0 {
		fmt.Fprintln(p.w, p.line())
	}
}

// lockedWriter serialises writes from the progress goroutine and the copy.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
