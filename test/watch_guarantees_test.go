package test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// evKey identifies one event of the history.
type evKey struct {
	rev   int64
	typ   mvccpb.Event_EventType
	key   string
	value string
}

func toEvKey(e *clientv3.Event) evKey {
	return evKey{e.Kv.ModRevision, e.Type, string(e.Kv.Key), string(e.Kv.Value)}
}

// watcherSpec is one of the 100 watchers.
type watcherSpec struct {
	prefix string
	start  int64 // 0: from now
}

// TestWatchGuarantees: 8 concurrent writers (puts, multi-put txns,
// deletes) and 100 watchers on several prefixes, some starting in the past.
// Each watcher must see exactly the reference history of its prefix from its
// start: ordered, no duplicate, no gap, each revision in one response; and a
// watcher canceled midway resumes from its last revision+1 with exactly the rest.
func TestWatchGuarantees(t *testing.T) {
	k := startKite(t)
	ctx := testCtx(t, 3*time.Minute)
	prefixes := []string{"g/a/", "g/b/", "g/", "g/a/1", "g/c/"}

	// Some history before the watchers start.
	for i := range 20 {
		if _, err := k.Client.Put(ctx, fmt.Sprintf("%s%d", prefixes[i%2], i), "pre"); err != nil {
			t.Fatal(err)
		}
	}
	const nWatchers = 100
	type seen struct {
		events []evKey
		err    error
	}
	results := make([]seen, nWatchers)
	specs := make([]watcherSpec, nWatchers)
	var wwg sync.WaitGroup
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	var doneRev int64
	var doneMu sync.Mutex
	doneCh := make(chan struct{})
	for i := range nWatchers {
		specs[i] = watcherSpec{prefix: prefixes[i%len(prefixes)]}
		if i%3 == 0 {
			specs[i].start = int64(2 + i%15)
		}
		opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithPrevKV()}
		if specs[i].start > 0 {
			opts = append(opts, clientv3.WithRev(specs[i].start))
		}
		cli := k.Client
		wch := cli.Watch(wctx, specs[i].prefix, opts...)
		wwg.Add(1)
		go func() {
			defer wwg.Done()
			for {
				select {
				case wr, ok := <-wch:
					if !ok {
						return
					}
					if err := wr.Err(); err != nil {
						results[i].err = err
						return
					}
					if err := atomicResponse(wr, results[i].events); err != nil && results[i].err == nil {
						results[i].err = err
					}
					for _, e := range wr.Events {
						results[i].events = append(results[i].events, toEvKey(e))
					}
				case <-doneCh:
					// Drain until the final revision is reached.
					doneMu.Lock()
					target := doneRev
					doneMu.Unlock()
					if n := len(results[i].events); n > 0 && results[i].events[n-1].rev >= target {
						return
					}
					select {
					case wr, ok := <-wch:
						if !ok {
							return
						}
						if err := atomicResponse(wr, results[i].events); err != nil && results[i].err == nil {
							results[i].err = err
						}
						for _, e := range wr.Events {
							results[i].events = append(results[i].events, toEvKey(e))
						}
					case <-time.After(30 * time.Second):
						results[i].err = fmt.Errorf("final revision %d not delivered in 30s", target)
						return
					}
				}
			}
		}()
	}
	// Every "from now" watcher has been created once a write made after the
	// creation shows up in it: wait for a marker on each prefix.
	startRev := syncMarker(t, ctx, k.Client, "g/")

	// Writers.
	var wg sync.WaitGroup
	var resumeErr error
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(w), 7))
			for i := range 60 {
				p := prefixes[rnd.IntN(len(prefixes))]
				key := fmt.Sprintf("%sw%d-%d", p, w, rnd.IntN(10))
				var err error
				switch rnd.IntN(4) {
				case 0:
					_, err = k.Client.Delete(ctx, key)
				case 1:
					_, err = k.Client.Txn(ctx).Then(
						clientv3.OpPut(key, fmt.Sprint(i)),
						clientv3.OpPut(key+"x", fmt.Sprint(i)),
						clientv3.OpPut(fmt.Sprintf("g/c/w%d", w), fmt.Sprint(i))).Commit()
				case 2:
					_, err = k.Client.Delete(ctx, p+"w"+fmt.Sprint(w), clientv3.WithPrefix())
				default:
					_, err = k.Client.Put(ctx, key, fmt.Sprint(i))
				}
				if err != nil {
					t.Errorf("writer %d: %v", w, err)
					return
				}
			}
		}()
	}
	// Meanwhile: a watcher canceled midway resumes from last+1.
	wg.Add(1)
	go func() {
		defer wg.Done()
		resumeErr = cancelAndResume(ctx, k.Client, "g/", startRev)
	}()
	wg.Wait()
	if resumeErr != nil {
		t.Errorf("resume: %v", resumeErr)
	}
	// The final write touches every watched prefix, so each watcher knows
	// when it has everything.
	final, err := k.Client.Txn(ctx).Then(
		clientv3.OpPut("g/a/1-final", "end"), clientv3.OpPut("g/b/final", "end"),
		clientv3.OpPut("g/c/final", "end")).Commit()
	if err != nil {
		t.Fatal(err)
	}
	doneMu.Lock()
	doneRev = final.Header.Revision
	doneMu.Unlock()
	close(doneCh)
	wwg.Wait()

	// Reference: the whole history, replayed from revision 1.
	ref := replay(t, k.Client, "g/", 1, doneRev)
	for i, r := range results {
		if r.err != nil {
			t.Errorf("watcher %d (%+v): %v", i, specs[i], r.err)
			continue
		}
		from := specs[i].start
		if from == 0 {
			from = startRev
		}
		want := filterEvents(ref, specs[i].prefix, from)
		got := r.events
		if specs[i].start == 0 {
			// A "from now" watcher may have started anywhere before the
			// marker: compare from its first revision >= startRev.
			got = filterEvents(got, specs[i].prefix, startRev)
		}
		if err := sameEvents(want, got); err != nil {
			t.Errorf("watcher %d (prefix %q from %d): %v", i, specs[i].prefix, from, err)
		}
	}
}

// atomicResponse checks a response does not continue a revision already
// seen in an earlier response (no revision split).
func atomicResponse(wr clientv3.WatchResponse, before []evKey) error {
	if len(wr.Events) == 0 || len(before) == 0 {
		return nil
	}
	if first, last := wr.Events[0].Kv.ModRevision, before[len(before)-1].rev; first <= last {
		return fmt.Errorf("response starts at revision %d after revision %d was delivered (split, duplicate or disorder)", first, last)
	}
	return nil
}

// syncMarker writes a marker under prefix and returns its revision.
func syncMarker(t *testing.T, ctx context.Context, cli *clientv3.Client, prefix string) int64 {
	t.Helper()
	// Give the watch creations time to reach the server (clientv3 creates
	// them asynchronously); a progress request is answered after them.
	if err := cli.RequestProgress(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	r, err := cli.Put(ctx, prefix+"marker", "m")
	if err != nil {
		t.Fatal(err)
	}
	return r.Header.Revision
}

// cancelAndResume watches prefix from rev, cancels after some events, and
// resumes from the last seen revision+1; the two parts together must equal
// one uninterrupted replay of the same range.
func cancelAndResume(ctx context.Context, cli *clientv3.Client, prefix string, rev int64) error {
	var got []evKey
	c1, cancel1 := context.WithCancel(ctx)
	wch := cli.Watch(c1, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev))
	for wr := range wch {
		if err := wr.Err(); err != nil {
			cancel1()
			return err
		}
		for _, e := range wr.Events {
			got = append(got, toEvKey(e))
		}
		if len(got) >= 30 {
			break
		}
	}
	cancel1()
	if len(got) == 0 {
		return fmt.Errorf("no events before cancel")
	}
	last := got[len(got)-1].rev
	// Wait until the writers are well past the cut, then resume and read up to the head.
	time.Sleep(time.Second)
	head, err := cli.Get(ctx, "nothing")
	if err != nil {
		return err
	}
	to := head.Header.Revision
	c2, cancel2 := context.WithTimeout(ctx, time.Minute)
	defer cancel2()
	for wr := range cli.Watch(c2, prefix, clientv3.WithPrefix(), clientv3.WithRev(last+1)) {
		if err := wr.Err(); err != nil {
			return err
		}
		for _, e := range wr.Events {
			got = append(got, toEvKey(e))
		}
		if n := len(got); n > 0 && got[n-1].rev >= to {
			break
		}
	}
	var want []evKey
	c3, cancel3 := context.WithTimeout(ctx, time.Minute)
	defer cancel3()
	for wr := range cli.Watch(c3, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev)) {
		if err := wr.Err(); err != nil {
			return err
		}
		for _, e := range wr.Events {
			want = append(want, toEvKey(e))
		}
		if n := len(want); n > 0 && want[n-1].rev >= got[len(got)-1].rev {
			break
		}
	}
	want = filterEvents(want, prefix, rev)
	trim := func(es []evKey, max int64) []evKey {
		var out []evKey
		for _, e := range es {
			if e.rev <= max {
				out = append(out, e)
			}
		}
		return out
	}
	return sameEvents(trim(want, got[len(got)-1].rev), got)
}

// replay reads the history of prefix from rev up to revision to.
func replay(t *testing.T, cli *clientv3.Client, prefix string, from, to int64) []evKey {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out []evKey
	for wr := range cli.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(from)) {
		if err := wr.Err(); err != nil {
			t.Fatalf("reference replay: %v", err)
		}
		for _, e := range wr.Events {
			out = append(out, toEvKey(e))
		}
		if n := len(out); n > 0 && out[n-1].rev >= to {
			break
		}
	}
	// The reference itself must be gapless over the whole key space we wrote.
	for i := 1; i < len(out); i++ {
		if out[i].rev < out[i-1].rev {
			t.Fatalf("reference replay out of order at %d: %v then %v", i, out[i-1], out[i])
		}
	}
	for rev, i := int64(2), 0; rev <= to; rev++ {
		if i >= len(out) || out[i].rev != rev {
			t.Fatalf("reference replay: no event at revision %d (every write touched g/)", rev)
		}
		for i < len(out) && out[i].rev == rev {
			i++
		}
	}
	return out
}

func filterEvents(evs []evKey, prefix string, from int64) []evKey {
	var out []evKey
	for _, e := range evs {
		if e.rev >= from && len(e.key) >= len(prefix) && e.key[:len(prefix)] == prefix {
			out = append(out, e)
		}
	}
	return out
}

func sameEvents(want, got []evKey) error {
	for i := range min(len(want), len(got)) {
		if want[i] != got[i] {
			return fmt.Errorf("event %d: got %+v, want %+v (got %d events, want %d)", i, got[i], want[i], len(got), len(want))
		}
	}
	if len(want) != len(got) {
		return fmt.Errorf("got %d events, want %d", len(got), len(want))
	}
	return nil
}
