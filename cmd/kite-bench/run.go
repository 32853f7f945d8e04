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
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kite-db/kite/internal/latency"
	"github.com/kite-db/kite/internal/testenv"
)

// target is one server under load, or several sharing one store, and the
// connections to them.
type target struct {
	name       string
	cl         *cluster // nil when the servers are not ours (--endpoints)
	partial    bool     // implements only part of etcd (kine)
	conns      []*clientv3.Client
	server     []int // server[i]: index of the server conns[i] talks to
	dataLoaded bool  // the shared read keys are in place
	// members asks a raft cluster's members who leads (cost.go); nil
	// until needed.
	members *memberClients
}

// connect opens cfg.conns connections (each its own gRPC channel), spread
// over the endpoints round-robin: connection i talks to endpoint i mod n
// only, so the clients of a workload (client i uses connection i mod
// --conns) are spread evenly over the servers.
func connect(cfg *config, name string, endpoints []string, cl *cluster) (*target, error) {
	t := &target{name: name, cl: cl}
	if cl != nil {
		t.partial = cl.kind.partial
	}
	conns, err := testenv.Clients(endpoints, cfg.conns)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", name, err)
	}
	t.conns = conns
	for i := range conns {
		t.server = append(t.server, i%len(endpoints))
	}
	return t, nil
}

func (t *target) close() {
	for _, c := range t.conns {
		c.Close()
	}
	if t.members != nil {
		t.members.close()
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

// runCompare measures a reference etcd and kite in one run (and kine in
// postgres and mysql modes with --kine-binary). Memory is measured on fresh servers
// so that it reflects the preloaded keys, not the allocations earlier
// workloads left behind. The workloads then run against all servers kept
// up side by side, alternating per workload, so a noisy neighbour on the
// shared machine hurts every column alike.
func runCompare(ctx context.Context, cfg *config, log *slog.Logger, runID string, stdout io.Writer, emit func(result) error) (err error) {
	etcdK, err := etcdKind("etcd", cfg)
	if err != nil {
		return err
	}
	kiteK, err := kiteKind(cfg)
	if err != nil {
		return err
	}
	kinds := []serverKind{etcdK, kiteK}
	var db testenv.Databases
	if onDatabaseServer(cfg) {
		if db, err = newDatabases(ctx, cfg, log); err != nil {
			return err
		}
		// Registered before any server starts, so it runs after they stop.
		defer func() { err = errors.Join(err, db.DropAll()) }()
		if cfg.kineBinary != "" {
			kine, err := resolveKine(ctx, cfg, log)
			if err != nil {
				return err
			}
			kinds = append(kinds, kineKind(kine, cfg.kineServers))
		}
	}
	var results []result
	var errs []error
	if cfg.memoryKeys > 0 {
		for _, k := range kinds {
			r, err := measureMemory(ctx, cfg, log, runID, k, db)
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
			t.cl.Stop()
		}
	}()
	for _, k := range kinds {
		c, err := startCluster(ctx, cfg, log, k, db)
		if err != nil {
			return errors.Join(append(errs, err)...)
		}
		t, err := connect(cfg, k.name, c.Endpoints(), c)
		if err != nil {
			c.Stop()
			return errors.Join(append(errs, err)...)
		}
		targets = append(targets, t)
	}
	wlResults, err := runWorkloads(ctx, cfg, log, runID, targets, emit)
	results = append(results, wlResults...)
	errs = append(errs, err)
	// While the servers are still up: a process's peak is gone with it.
	for _, t := range targets {
		r, err := peakMemory(t)
		if err != nil {
			// A server that exited was reported by the workload it died in.
			log.Warn("peak memory not measured", "target", t.name, "error", err)
			continue
		}
		results = append(results, r)
		errs = append(errs, emit(r))
	}

	fmt.Fprintln(stdout)
	errs = append(errs, writeTable(stdout, results))
	for _, k := range kinds[2:] {
		fmt.Fprintln(stdout)
		errs = append(errs, writeRatios(stdout, results, kiteK.name, k.name))
	}
	fmt.Fprintln(stdout)
	errs = append(errs, writeRatios(stdout, results, kiteK.name, etcdK.name))
	if hasCost(results) {
		fmt.Fprintln(stdout)
		errs = append(errs, writeCosts(stdout, results, kiteK.name, etcdK.name))
	}
	if hasNodeRSS(results) {
		fmt.Fprintln(stdout)
		errs = append(errs, writeNodeRSS(stdout, results, kiteK.name, etcdK.name))
	}
	if hasFailover(results) {
		fmt.Fprintln(stdout)
		errs = append(errs, writeFailover(stdout, results, kiteK.name, etcdK.name))
	}
	return errors.Join(errs...)
}

// runWorkloads runs every workload on every target, in that nesting, and
// emits each result as soon as it is known. A failing workload does not
// stop the others; its error is returned at the end. On a partial target
// (kine) a workload that failed outright is reported as unsupported, with
// its error, and does not fail the run. The first workload of a target
// that reads the shared keys loads them first, and that load is a row of
// its own ("load").
func runWorkloads(ctx context.Context, cfg *config, log *slog.Logger, runID string, targets []*target, emit func(result) error) ([]result, error) {
	defs := workloadDefs()
	var results []result
	var errs []error
	keep := func(rs ...result) {
		for _, r := range rs {
			results = append(results, r)
			errs = append(errs, emit(r))
		}
	}
	for _, s := range cfg.workloads {
		for _, t := range targets {
			if err := ctx.Err(); err != nil {
				return results, errors.Join(append(errs, fmt.Errorf("interrupted: %w", err))...)
			}
			e := &env{cfg: cfg, t: t, log: log, runID: runID}
			def := defs[s.name]
			var rs []result
			var err error
			if t.cl != nil && t.cl.Exited() != nil {
				// A server that died (a crash under the previous workload)
				// would make every request to it wait for its timeout. A
				// partial reference is started again (kine crashes under
				// concurrent plain puts of one key); kite is not.
				if t.partial {
					err = t.cl.RestartExited(ctx, cfg.StartupWait)
				} else {
					err = t.cl.Exited()
				}
			}
			// Loads are outside the measured interval and the profile.
			if err == nil && def.needsData && !t.dataLoaded {
				var load result
				if load, err = e.loadData(ctx); err == nil {
					if t.cl != nil {
						if nodes, err := t.cl.RSS(); err == nil {
							load.setRSS(nodes)
						}
					}
					keep(load)
				}
			}
			if err == nil && def.prepare != nil {
				err = def.prepare(ctx, e, s)
			}
			if err == nil {
				log.Info("running workload", "target", t.name, "workload", s.label, "clients", s.clients)
				var before costSample
				if t.cl != nil {
					before = sampleCost(ctx, t, log)
				}
				stopProfile := startProfiles(ctx, cfg, log, t, s.label)
				rs, err = def.run(ctx, e, s)
				stopProfile()
				if err == nil && t.cl != nil && len(rs) > 0 {
					rs[0].cost = costBetween(before, sampleCost(ctx, t, log), t.cl.Names(), rs[0].Ops)
				}
			}
			var r result // the workload's own row; rs[1:] measured beside it
			if len(rs) > 0 {
				r = rs[0]
			}
			if t.partial && (err != nil || (r.Ops == 0 && r.Errors > 0)) {
				r = unsupportedResult(t.name, s, r, err)
				log.Warn("workload not served", "target", t.name, "workload", s.label, "note", r.Note)
				keep(r)
				continue
			}
			if err != nil {
				log.Error("workload failed", "target", t.name, "workload", s.label, "error", err)
				errs = append(errs, fmt.Errorf("%s on %s: %w", s.label, t.name, err))
				continue
			}
			if t.cl != nil {
				if err := t.cl.Exited(); err != nil {
					if t.partial {
						// A reference that crashed is a finding about it, not a failed run.
						for i := range rs {
							rs[i].Note = "server exited during the workload: " + err.Error()
						}
					} else {
						errs = append(errs, fmt.Errorf("%s during %s: %w", t.name, s.label, err))
					}
				} else if nodes, err := t.cl.RSS(); err == nil {
					for i := range rs {
						rs[i].setRSS(nodes)
					}
				}
			}
			keep(rs...)
		}
	}
	return results, errors.Join(errs...)
}

// unsupportedResult is the row of a workload a partial server (kine) did
// not serve: "unsupported by NAME" when it answered Unimplemented (kine's
// answer to what it leaves out), "failed on NAME" for any other error,
// with the error either way.
func unsupportedResult(name string, s spec, r result, err error) result {
	msg := r.FirstError
	if err != nil {
		msg = err.Error()
	}
	if r.Workload == "" {
		r = newResult(name, s, 0, 0, &latency.Histogram{}, r.Errors)
	}
	if status.Code(err) == codes.Unimplemented || strings.Contains(msg, "code = Unimplemented") {
		r.Note = "unsupported by " + name + ": " + msg
	} else {
		r.Note = "failed on " + name + ": " + msg
	}
	r.NotServed = true
	return r
}

// measureMemory starts a fresh server of kind, preloads --memory-keys keys
// of --val-size bytes, and reports its resident memory.
func measureMemory(ctx context.Context, cfg *config, log *slog.Logger, runID string, kind serverKind, db testenv.Databases) (result, error) {
	p, err := startCluster(ctx, cfg, log, kind, db)
	if err != nil {
		return result{}, err
	}
	defer p.Stop()
	t, err := connect(cfg, kind.name, p.Endpoints(), p)
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
	nodes, err := p.RSS()
	if err != nil {
		return result{}, err
	}
	r := newResult(kind.name, spec{label: label, clients: 32}, int64(cfg.memoryKeys), took, &latency.Histogram{}, 0)
	r.setRSS(nodes)
	log.Info("measured memory", "server", kind.name, "keys", cfg.memoryKeys, "rss_mib", testenv.MiB(r.RSSBytes), "max_rss_mib", testenv.MiB(r.RSSMaxBytes))
	return r, nil
}

// peakRSSLabel is the workload name of the row that reports the servers'
// peak resident memory over the whole run.
const peakRSSLabel = "peak-rss"

// peakMemory reports the peak resident memory (VmHWM) of t's servers over
// their life: the memory rows after each workload show where memory
// settled, and miss what a list or a load held for a moment. Its
// rss_bytes is the largest server's peak, not a sum as in the other rows:
// the servers' peaks need not be at the same moment, so their sum is
// nothing that was ever resident. A server started again during the run
// (failover, a crashed kine) counts only since its last start, and the
// row's note says so.
func peakMemory(t *target) (result, error) {
	if err := t.cl.Exited(); err != nil {
		return result{}, err
	}
	nodes, err := t.cl.PeakRSS()
	if err != nil {
		return result{}, err
	}
	r := result{Workload: peakRSSLabel, Target: t.name}
	r.setRSS(nodes)
	if len(nodes) > 1 {
		r.RSSBytes = r.RSSMaxBytes
	}
	if restarted := t.cl.Restarted(); len(restarted) > 0 {
		r.Note = "peak since the last start of " + strings.Join(restarted, ", ") + ", started again during the run"
	}
	return r, nil
}
