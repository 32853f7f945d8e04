package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// target is one server under load and the connections to it.
type target struct {
	name       string
	proc       *serverProc // nil when the server is not ours (--endpoints)
	conns      []*clientv3.Client
	dataLoaded bool // the shared read keys are in place
}

// connect opens cfg.conns connections (each its own gRPC channel) to the
// endpoints.
func connect(cfg *config, name string, endpoints []string, proc *serverProc) (*target, error) {
	t := &target{name: name, proc: proc}
	for range cfg.conns {
		c, err := clientv3.New(clientv3.Config{
			Endpoints:   endpoints,
			DialTimeout: 5 * time.Second,
			// clientv3 logs every retry at warn; the benchmark counts errors itself.
			Logger: zap.NewNop(),
		})
		if err != nil {
			t.close()
			return nil, fmt.Errorf("connect to %s: %w", name, err)
		}
		t.conns = append(t.conns, c)
	}
	return t, nil
}

func (t *target) close() {
	for _, c := range t.conns {
		c.Close()
	}
}

// run executes the whole benchmark and prints its report to stdout.
func run(ctx context.Context, cfg *config, log *slog.Logger, stdout io.Writer) error {
	// A run ID in every key keeps repeated runs on one endpoint apart.
	runID := strconv.FormatInt(time.Now().UnixNano(), 36)
	jsonOut := stdout
	if cfg.jsonPath != "" {
		f, err := os.Create(cfg.jsonPath)
		if err != nil {
			return fmt.Errorf("create --json file: %w", err)
		}
		defer f.Close()
		jsonOut = io.MultiWriter(stdout, f)
	}
	emit := func(r result) error { return writeJSONLine(jsonOut, r) }

	if !cfg.compare {
		t, err := connect(cfg, strings.Join(cfg.endpoints, ","), cfg.endpoints, nil)
		if err != nil {
			return err
		}
		defer t.close()
		results, runErr := runWorkloads(ctx, cfg, log, runID, []*target{t}, emit)
		fmt.Fprintln(stdout)
		return errors.Join(runErr, writeTable(stdout, results))
	}
	return runCompare(ctx, cfg, log, runID, stdout, emit)
}

// runCompare measures a reference etcd and kite in one run. Memory is
// measured on fresh servers so that it reflects the preloaded keys, not the
// allocations earlier workloads left behind. The workloads then run against
// both servers kept up side by side, alternating per workload, so a noisy
// neighbour on the shared machine hurts both columns alike.
func runCompare(ctx context.Context, cfg *config, log *slog.Logger, runID string, stdout io.Writer, emit func(result) error) error {
	etcdK, err := etcdKind("etcd")
	if err != nil {
		return err
	}
	kiteK, err := kiteKind(cfg.kiteBinary)
	if err != nil {
		return err
	}
	kinds := []serverKind{etcdK, kiteK}
	var results []result
	var errs []error
	if cfg.memoryKeys > 0 {
		for _, k := range kinds {
			r, err := measureMemory(ctx, cfg, log, runID, k)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			results = append(results, r)
			errs = append(errs, emit(r))
		}
	}

	var targets []*target
	defer func() {
		for _, t := range targets {
			t.close()
			t.proc.stop()
		}
	}()
	for _, k := range kinds {
		p, err := startServer(ctx, cfg, log, k)
		if err != nil {
			return errors.Join(append(errs, err)...)
		}
		t, err := connect(cfg, k.name, []string{p.endpoint}, p)
		if err != nil {
			p.stop()
			return errors.Join(append(errs, err)...)
		}
		targets = append(targets, t)
	}
	wlResults, err := runWorkloads(ctx, cfg, log, runID, targets, emit)
	results = append(results, wlResults...)
	errs = append(errs, err)

	fmt.Fprintln(stdout)
	errs = append(errs, writeTable(stdout, results))
	fmt.Fprintln(stdout)
	errs = append(errs, writeRatios(stdout, results, kiteK.name, etcdK.name))
	return errors.Join(errs...)
}

// runWorkloads runs every workload on every target, in that nesting, and
// emits each result as soon as it is known. A failing workload does not
// stop the others; its error is returned at the end.
func runWorkloads(ctx context.Context, cfg *config, log *slog.Logger, runID string, targets []*target, emit func(result) error) ([]result, error) {
	defs := workloadDefs()
	var results []result
	var errs []error
	for _, s := range cfg.workloads {
		for _, t := range targets {
			if err := ctx.Err(); err != nil {
				return results, errors.Join(append(errs, fmt.Errorf("interrupted: %w", err))...)
			}
			e := &env{cfg: cfg, t: t, log: log, runID: runID}
			log.Info("running workload", "target", t.name, "workload", s.label, "clients", s.clients)
			r, err := defs[s.name].run(ctx, e, s)
			if err != nil {
				log.Error("workload failed", "target", t.name, "workload", s.label, "error", err)
				errs = append(errs, fmt.Errorf("%s on %s: %w", s.label, t.name, err))
				continue
			}
			if t.proc != nil {
				if rss, err := t.proc.rss(); err == nil {
					r.RSSBytes = rss
				} else {
					errs = append(errs, fmt.Errorf("%s exited during %s: %w", t.name, s.label, err))
				}
			}
			results = append(results, r)
			errs = append(errs, emit(r))
		}
	}
	return results, errors.Join(errs...)
}

// measureMemory starts a fresh server of kind, preloads --memory-keys keys
// of --val-size bytes, and reports its resident memory.
func measureMemory(ctx context.Context, cfg *config, log *slog.Logger, runID string, kind serverKind) (result, error) {
	p, err := startServer(ctx, cfg, log, kind)
	if err != nil {
		return result{}, err
	}
	defer p.stop()
	t, err := connect(cfg, kind.name, []string{p.endpoint}, p)
	if err != nil {
		return result{}, err
	}
	defer t.close()
	e := &env{cfg: cfg, t: t, log: log, runID: runID}
	label := "memory-" + strconv.Itoa(cfg.memoryKeys)
	start := time.Now()
	if err := preload(ctx, e, e.prefix(label), cfg.memoryKeys, cfg.valSize); err != nil {
		return result{}, fmt.Errorf("%s: preload %d keys: %w", kind.name, cfg.memoryKeys, err)
	}
	took := time.Since(start)
	// Let background work triggered by the writes (etcd's snapshot, a
	// checkpoint) settle, so the number is the steady state with the keys.
	select {
	case <-time.After(2 * time.Second):
	case <-ctx.Done():
		return result{}, ctx.Err()
	}
	rss, err := p.rss()
	if err != nil {
		return result{}, err
	}
	r := newResult(kind.name, spec{label: label, clients: 32}, int64(cfg.memoryKeys), took, &histogram{}, 0)
	r.RSSBytes = rss
	log.Info("measured memory", "server", kind.name, "keys", cfg.memoryKeys, "rss_mib", mib(rss))
	return r, nil
}
