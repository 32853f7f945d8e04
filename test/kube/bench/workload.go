package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/kite-db/kite/internal/latency"
)

// phase is one measured pass of the workers over the objects.
type phase struct {
	Objects   int     `json:"objects"`
	Errors    int64   `json:"errors"`
	Seconds   float64 `json:"seconds"`
	PerSecond float64 `json:"per_second"`
	P50ms     float64 `json:"p50_ms"`
	P99ms     float64 `json:"p99_ms"`
	// StorageCPU is the storage's CPU seconds during the phase.
	StorageCPU float64 `json:"storage_cpu_s"`
}

func (p phase) rate() string {
	if p.Objects == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f", p.PerSecond)
}

func (p phase) lat() string {
	if p.Objects == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f/%.1f", p.P50ms, p.P99ms)
}

// cmName names object i; the zero padding keeps the keys in storage in the
// order they are created.
func cmName(i int) string { return fmt.Sprintf("cm-%07d", i) }

// newConfigMap is object i with version v of its data.
func newConfigMap(ns string, i, v int, pad string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: cmName(i), Namespace: ns, Labels: map[string]string{"app": "kube-bench"}},
		Data:       map[string]string{"v": strconv.Itoa(v), "pad": pad},
	}
}

// forEach runs op on 0..n-1 with workers goroutines, timing each call, and
// returns the phase's numbers. A failed call is counted and logged (the
// first few), not retried: a storage that fails requests shows it.
func forEach(ctx context.Context, log *slog.Logger, what string, n, workers int, cpu func() float64, op func(ctx context.Context, i int) error) phase {
	var next, errs atomic.Int64
	hists := make([]latency.Histogram, workers)
	cpu0 := cpu()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				t := time.Now()
				err := op(ctx, i)
				hists[w].Record(time.Since(t))
				if err != nil {
					if errs.Add(1) <= 5 {
						log.Warn("request failed", "phase", what, "object", i, "error", err)
					}
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	var h latency.Histogram
	for i := range hists {
		h.Merge(&hists[i])
	}
	p := phase{
		Objects: n, Errors: errs.Load(), Seconds: took.Seconds(), PerSecond: float64(n) / took.Seconds(),
		P50ms: latency.Ms(h.Percentile(0.50)), P99ms: latency.Ms(h.Percentile(0.99)),
		StorageCPU: cpu() - cpu0,
	}
	log.Info("phase done", "phase", what, "objects", n, "seconds", fmt.Sprintf("%.1f", p.Seconds),
		"per_second", int(p.PerSecond), "p50_ms", p.P50ms, "p99_ms", p.P99ms, "errors", p.Errors)
	return p
}

func createNamespace(ctx context.Context, cs *kubernetes.Clientset, ns string) error {
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create namespace %s: %w", ns, err)
	}
	return nil
}

// crud is step 2: create every object, update each once (a PUT carrying
// the resourceVersion its create returned, as a controller does), delete
// each. after is called at the end of each phase with its name.
func crud(ctx context.Context, log *slog.Logger, cfg *config, cs *kubernetes.Clientset, cpu func() float64, after func(string)) (create, update, del phase, err error) {
	const ns = "kube-bench-crud"
	if err := createNamespace(ctx, cs, ns); err != nil {
		return phase{}, phase{}, phase{}, err
	}
	cms := cs.CoreV1().ConfigMaps(ns)
	pad := strings.Repeat("x", cfg.valueSize)
	rvs := make([]string, cfg.objects)
	create = forEach(ctx, log, "create", cfg.objects, cfg.workers, cpu, func(ctx context.Context, i int) error {
		cm, err := cms.Create(ctx, newConfigMap(ns, i, 0, pad), metav1.CreateOptions{})
		if err != nil {
			return err
		}
		rvs[i] = cm.ResourceVersion
		return nil
	})
	after("create")
	update = forEach(ctx, log, "update", cfg.objects, cfg.workers, cpu, func(ctx context.Context, i int) error {
		cm := newConfigMap(ns, i, 1, pad)
		cm.ResourceVersion = rvs[i]
		_, err := cms.Update(ctx, cm, metav1.UpdateOptions{})
		return err
	})
	after("update")
	del = forEach(ctx, log, "delete", cfg.objects, cfg.workers, cpu, func(ctx context.Context, i int) error {
		return cms.Delete(ctx, cmName(i), metav1.DeleteOptions{})
	})
	after("delete")
	return create, update, del, ctx.Err()
}

// watchResult is step 3.
type watchResult struct {
	Updates int64 `json:"updates"` // acknowledged
	Errors  int64 `json:"errors"`
	// Rate is the updates per second achieved (the target is --watch-rate).
	Rate float64 `json:"rate"`
	// Delivered counts events matched to an acknowledged update.
	Delivered int64 `json:"delivered"`
	// Missed is acknowledged updates whose event never came (must be 0).
	Missed int64 `json:"missed"`
	// P50ms and P99ms run from just before the update was sent to the
	// event's arrival; AfterAck* from the update's acknowledgement (an
	// event that beat its acknowledgement counts 0).
	P50ms       float64 `json:"p50_ms"`
	P99ms       float64 `json:"p99_ms"`
	AfterAckP50 float64 `json:"after_ack_p50_ms"`
	AfterAckP99 float64 `json:"after_ack_p99_ms"`
	// Rewatches counts watches that ended and were opened again.
	Rewatches int `json:"rewatches"`
}

// watchDelivery is step 3: a watch on the ConfigMaps of one namespace, then
// --watch-rate updates a second for --watch-duration, spread over
// --watch-objects objects so that no object has two updates in flight; each
// event is matched to its update by name and resourceVersion.
func watchDelivery(ctx context.Context, log *slog.Logger, cfg *config, cs *kubernetes.Clientset) (watchResult, error) {
	const ns = "kube-bench-watch"
	if err := createNamespace(ctx, cs, ns); err != nil {
		return watchResult{}, err
	}
	cms := cs.CoreV1().ConfigMaps(ns)
	pad := strings.Repeat("x", cfg.valueSize)
	k := cfg.watchObjects
	for i := range k {
		if _, err := cms.Create(ctx, newConfigMap(ns, i, 0, pad), metav1.CreateOptions{}); err != nil {
			return watchResult{}, fmt.Errorf("create watched configmap: %w", err)
		}
	}
	list, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		return watchResult{}, fmt.Errorf("list watched configmaps: %w", err)
	}

	type sent struct{ start, ack time.Time }
	var (
		mu       sync.Mutex
		sentAt   = map[string]sent{}      // name/rv of acknowledged updates not yet seen
		early    = map[string]time.Time{} // name/rv of events seen before their acknowledgement
		fromSend latency.Histogram
		fromAck  latency.Histogram
		res      watchResult
	)
	match := func(arrived time.Time, s sent) {
		fromSend.Record(arrived.Sub(s.start))
		fromAck.Record(arrived.Sub(s.ack))
		res.Delivered++
	}

	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	watchDone := make(chan error, 1)
	rv := list.ResourceVersion
	open := func() (watch.Interface, error) {
		return cms.Watch(wctx, metav1.ListOptions{ResourceVersion: rv})
	}
	w, err := open()
	if err != nil {
		return watchResult{}, fmt.Errorf("watch configmaps: %w", err)
	}
	go func() {
		defer func() { w.Stop() }()
		for {
			ev, ok := <-w.ResultChan()
			if !ok {
				if wctx.Err() != nil {
					watchDone <- nil
					return
				}
				// kube-apiserver ends a watch at its timeout; go on from the
				// last event seen, so none is lost in between.
				var err error
				if w, err = open(); err != nil {
					watchDone <- fmt.Errorf("watch again from %s: %w", rv, err)
					return
				}
				mu.Lock()
				res.Rewatches++
				mu.Unlock()
				continue
			}
			now := time.Now()
			if ev.Type == watch.Error {
				// client-go reports its own cancellation as an error event.
				if wctx.Err() != nil {
					watchDone <- nil
				} else {
					watchDone <- fmt.Errorf("watch error event: %v", ev.Object)
				}
				return
			}
			cm, ok := ev.Object.(*corev1.ConfigMap)
			if !ok || ev.Type != watch.Modified {
				continue
			}
			rv = cm.ResourceVersion
			key := cm.Name + "/" + cm.ResourceVersion
			mu.Lock()
			if s, ok := sentAt[key]; ok {
				delete(sentAt, key)
				match(now, s)
			} else {
				early[key] = now
			}
			mu.Unlock()
		}
	}()

	total := int(cfg.watchRate * cfg.watchDuration.Seconds())
	jobs := make(chan int)
	var errs atomic.Int64
	var wg sync.WaitGroup
	// Enough senders that one slow update does not hold up the pace.
	for range min(32, k) {
		wg.Go(func() {
			for j := range jobs {
				i := j % k
				cm := newConfigMap(ns, i, j+1, pad)
				start := time.Now()
				// No resourceVersion: an unconditional update, so the pace
				// never waits on a read of the object.
				got, err := cms.Update(ctx, cm, metav1.UpdateOptions{})
				ack := time.Now()
				if err != nil {
					if errs.Add(1) <= 5 {
						log.Warn("watched update failed", "error", err)
					}
					continue
				}
				key := got.Name + "/" + got.ResourceVersion
				mu.Lock()
				res.Updates++
				if at, ok := early[key]; ok {
					delete(early, key)
					match(at, sent{start, ack})
				} else {
					sentAt[key] = sent{start, ack}
				}
				mu.Unlock()
			}
		})
	}
	begin := time.Now()
	interval := time.Duration(float64(time.Second) / cfg.watchRate)
pace:
	for j := range total {
		if d := time.Until(begin.Add(time.Duration(j) * interval)); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				break pace
			}
		}
		select {
		case jobs <- j:
		case <-ctx.Done():
			break pace
		}
	}
	close(jobs)
	wg.Wait()
	took := time.Since(begin)

	// Every acknowledged update's event is due; give the watch a while.
	deadline := time.Now().Add(cfg.watchGrace)
	for {
		mu.Lock()
		pending := len(sentAt)
		mu.Unlock()
		if pending == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	stopWatch()
	var werr error
	select {
	case werr = <-watchDone:
	case <-time.After(10 * time.Second):
		werr = errors.New("watch goroutine did not stop")
	}
	mu.Lock()
	defer mu.Unlock()
	res.Errors = errs.Load()
	res.Missed = int64(len(sentAt))
	res.Rate = float64(res.Updates) / took.Seconds()
	res.P50ms, res.P99ms = latency.Ms(fromSend.Percentile(0.50)), latency.Ms(fromSend.Percentile(0.99))
	res.AfterAckP50, res.AfterAckP99 = latency.Ms(fromAck.Percentile(0.50)), latency.Ms(fromAck.Percentile(0.99))
	log.Info("watch delivery done", "updates", res.Updates, "rate", int(res.Rate), "delivered", res.Delivered,
		"missed", res.Missed, "p50_ms", res.P50ms, "p99_ms", res.P99ms, "rewatches", res.Rewatches)
	return res, errors.Join(werr, ctx.Err())
}

// restartResult is step 4.
type restartResult struct {
	Objects int   `json:"objects"`
	Load    phase `json:"load"`
	// ReadySeconds runs from kube-apiserver's start to /readyz ok; by then it
	// has listed every resource from storage into its watch cache.
	ReadySeconds float64 `json:"ready_s"`
	// ListSeconds runs from the start to the first list of the namespace
	// that returns every object.
	ListSeconds float64 `json:"list_s"`
}

// fill is step 4's first half: --restart-objects ConfigMaps in a namespace
// of their own, created by the workers.
func fill(ctx context.Context, log *slog.Logger, cfg *config, cs *kubernetes.Clientset, cpu func() float64) (phase, error) {
	const ns = "kube-bench-restart"
	if err := createNamespace(ctx, cs, ns); err != nil {
		return phase{}, err
	}
	cms := cs.CoreV1().ConfigMaps(ns)
	pad := strings.Repeat("x", cfg.valueSize)
	p := forEach(ctx, log, "fill", cfg.restartObjects, cfg.workers, cpu, func(ctx context.Context, i int) error {
		_, err := cms.Create(ctx, newConfigMap(ns, i, 0, pad), metav1.CreateOptions{})
		return err
	})
	return p, ctx.Err()
}

// listedAll polls a list of the restart namespace until it has n objects.
func listedAll(ctx context.Context, cs *kubernetes.Clientset, n int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		l, err := cs.CoreV1().ConfigMaps("kube-bench-restart").List(ctx, metav1.ListOptions{})
		if err == nil && len(l.Items) >= n {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("listed %d of %d", len(l.Items), n)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("list after restart: %w (last: %w)", ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
