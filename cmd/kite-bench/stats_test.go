package main

import (
	"context"
	"testing"
	"time"
)

// deadlinePassed is a context whose deadline has passed while its Err is
// still nil, the moment between a context's deadline and its timer firing.
type deadlinePassed struct{ context.Context }

func (deadlinePassed) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }
func (deadlinePassed) Err() error                  { return nil }

func TestRunEnded(t *testing.T) {
	if runEnded(context.Background()) {
		t.Fatal("a context without deadline counts as ended")
	}
	if !runEnded(deadlinePassed{context.Background()}) {
		t.Fatal("a context past its deadline does not count as ended before its timer fires")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if !runEnded(ctx) {
		t.Fatal("a cancelled context does not count as ended")
	}
}
