package mvcc

import (
	"context"
	"sync"
	"time"
)

// Trace records the steps of one request as it moves through the Store,
// so a request that turns out slow can be logged with where its time went,
// as etcd logs the trace of an expensive request. The caller that wants a
// trace puts one in the request's context (WithTrace); the Store marks
// steps on it. A request without one records nothing.
type Trace struct {
	mu    sync.Mutex
	start time.Time
	steps []TraceStep
	buf   [6]TraceStep // most requests mark fewer steps: no allocation
}

// TraceStep is one step: what ended, and when.
type TraceStep struct {
	Name string
	At   time.Time
}

type traceKey struct{}

// WithTrace returns ctx carrying a new Trace started now, and the Trace.
func WithTrace(ctx context.Context) (context.Context, *Trace) {
	t := &Trace{start: time.Now()}
	t.steps = t.buf[:0]
	return context.WithValue(ctx, traceKey{}, t), t
}

// traceFrom returns ctx's Trace, or nil.
func traceFrom(ctx context.Context) *Trace {
	t, _ := ctx.Value(traceKey{}).(*Trace)
	return t
}

// TraceStepOf marks a step on ctx's Trace, if it has one; for the parts of
// the write path outside this package (a replicated log).
func TraceStepOf(ctx context.Context, name string) { traceFrom(ctx).step(name) }

// step marks the end of a step; a nil Trace ignores it.
func (t *Trace) step(name string) {
	if t == nil {
		return
	}
	now := time.Now()
	t.mu.Lock()
	t.steps = append(t.steps, TraceStep{Name: name, At: now})
	t.mu.Unlock()
}

// Start is when the trace began.
func (t *Trace) Start() time.Time { return t.start }

// Steps returns the steps marked so far, in order.
func (t *Trace) Steps() []TraceStep {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]TraceStep(nil), t.steps...)
}
