package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kite-db/kite/internal/latency"
)

// spec is one workload of a run: a name and how many clients drive it.
// label is how it appears in reports ("put@64").
type spec struct {
	name    string
	label   string
	clients int
}

// workloadDef describes one workload kind.
type workloadDef struct {
	// defaultClients is the client count when the spec names none.
	defaultClients func(cfg *config) int
	// run measures the workload and returns its rows: the first under the
	// spec's label, and after it any further measurement of the same run
	// (list-under-writes also reports its writer, as "LABEL/write").
	run func(ctx context.Context, e *env, s spec) ([]result, error)
	// needsData: the workload reads the shared preloaded keys, which are
	// written before its clock (and any profile) starts.
	needsData bool
	// prepare, when set, writes the keys the workload owns (delete's) before
	// its clock and any profile start, so neither counts the load.
	prepare func(ctx context.Context, e *env, s spec) error
}

// one adapts a workload that measures one thing to workloadDef.run.
func one(run func(ctx context.Context, e *env, s spec) (result, error)) func(ctx context.Context, e *env, s spec) ([]result, error) {
	return func(ctx context.Context, e *env, s spec) ([]result, error) {
		r, err := run(ctx, e, s)
		return []result{r}, err
	}
}

func fromFlag(cfg *config) int { return cfg.clients }
func single(*config) int       { return 1 }

// workloadDefs returns the workload registry. A function, not a package
// variable, so nothing global can be mutated.
func workloadDefs() map[string]workloadDef {
	return map[string]workloadDef{
		"put":               {defaultClients: fromFlag, run: one(runPut)},
		"put-paced":         {defaultClients: single, run: one(runPutPaced)},
		"txn-update":        {defaultClients: fromFlag, run: one(runTxnUpdate)},
		"delete":            {defaultClients: fromFlag, run: one(runDelete), prepare: prepareDelete},
		"get":               {defaultClients: fromFlag, run: one(runGet), needsData: true},
		"get-serializable":  {defaultClients: fromFlag, run: one(runGet), needsData: true},
		"list":              {defaultClients: single, run: one(runList), needsData: true},
		"list-all":          {defaultClients: single, run: one(runListAll), needsData: true},
		"list-stream":       {defaultClients: single, run: one(runListStream), needsData: true},
		"list-under-writes": {defaultClients: single, run: runListUnderWrites, needsData: true},
		"count":             {defaultClients: fromFlag, run: one(runCount), needsData: true},
		"watch":             {defaultClients: fromFlag, run: one(runWatch)},
		"watch-remote":      {defaultClients: fromFlag, run: one(runWatchRemote)},
		"mixed":             {defaultClients: fromFlag, run: one(runMixed), needsData: true},
		"failover":          {defaultClients: single, run: one(runFailover)},
	}
}

func workloadNames() []string {
	names := make([]string, 0, 15)
	for n := range workloadDefs() {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// parseSpecs parses "put@64,get,list".
func parseSpecs(s string, cfg *config) ([]spec, error) {
	defs := workloadDefs()
	var specs []spec
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, clients, hasClients := strings.Cut(item, "@")
		def, ok := defs[name]
		if !ok {
			return nil, fmt.Errorf("unknown workload %q (known: %s)", name, strings.Join(workloadNames(), ", "))
		}
		if slices.ContainsFunc(specs, func(o spec) bool { return o.label == item }) {
			// Each workload owns the keys under its label.
			return nil, fmt.Errorf("workload %q given twice", item)
		}
		sp := spec{name: name, label: item, clients: def.defaultClients(cfg)}
		if hasClients {
			n, err := strconv.Atoi(clients)
			if err != nil || n < 1 {
				return nil, fmt.Errorf("workload %q: clients must be a positive number", item)
			}
			sp.clients = n
		}
		specs = append(specs, sp)
	}
	if len(specs) == 0 {
		return nil, errors.New("no workloads given")
	}
	return specs, nil
}

// env is what a workload runs against: one target and the run's settings.
type env struct {
	cfg   *config
	t     *target
	log   *slog.Logger
	runID string
}

// prefix is the key prefix owned by one workload of this run. The run ID
// keeps runs against the same long-lived endpoint from seeing each other's
// keys (a create-if-absent of a leftover key would fail).
func (e *env) prefix(label string) string {
	return "/kite-bench/" + e.runID + "/" + label + "/"
}

// dataPrefix holds the --keys preloaded keys the read workloads share.
func (e *env) dataPrefix() string { return e.prefix("data") }

// conn returns the connection client i uses: clients are spread evenly.
func (e *env) conn(i int) *clientv3.Client { return e.t.conns[i%len(e.t.conns)] }

// preload writes n keys under prefix with 32 concurrent writers, one Put
// each. Only --memory-keys uses it: etcd keeps its recent raft entries in
// memory, so loading in transactions of many puts (loadKeys) would grow
// the reference's resident memory with the size of each entry, and the
// memory rows are comparable with earlier runs only if loaded as before.
func preload(ctx context.Context, e *env, prefix string, n, valSize int) error {
	const writers = 32
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	value := makeValue(valSize, 1)
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			kv := e.conn(w)
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				opCtx, opCancel := context.WithTimeout(ctx, e.cfg.OpTimeout)
				_, err := kv.Put(opCtx, key(prefix, i), value)
				opCancel()
				if err != nil {
					cancel(fmt.Errorf("put %s: %w", key(prefix, i), err))
					return
				}
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}

// key is the i-th key under prefix; zero padding keeps key order equal to
// numeric order, which the paginated list relies on to count pages.
func key(prefix string, i int) string { return prefix + fmt.Sprintf("%08d", i) }

// makeValue returns a value of size bytes. Random letters, not zeros, so a
// storage that compresses gains nothing the real world would not give it.
func makeValue(size int, seed uint64) string {
	r := rand.New(rand.NewPCG(seed, 0x6b697465))
	b := make([]byte, size)
	for i := range b {
		b[i] = byte('a' + r.IntN(26))
	}
	return string(b)
}

// outcome is what a closed-loop run measured.
type outcome struct {
	ops, errors int64
	firstErr    string // the first operation error, if any
	hist        latency.Histogram
	elapsed     time.Duration
}

// opFunc performs one measured operation of one client.
type opFunc func(ctx context.Context) error

// errNoMoreWork, returned by an opFunc, ends its client's loop without an
// operation or an error: the work the workload prepared is used up (delete
// has deleted every key it loaded), which ends a run as --duration does.
// A constant, so no package-level variable exists to be reassigned.
const errNoMoreWork = sentinelError("no more work")

// sentinelError is an error that can be a constant; errors.Is matches it
// by value.
type sentinelError string

func (e sentinelError) Error() string { return string(e) }

// closedLoop runs clients workers, each issuing operations back to back,
// until --total operations were started or --duration passed. newClient is
// called once per worker, before the clock starts, so each worker can own
// its state (its keys, its random source) without locks.
// runEnded reports whether the run's context is over. Its deadline counts as
// soon as it passes: the operation's own context, derived from it, has its
// own timer and may report the deadline a little before the run's context
// does, and the operations failing in between are the run ending, not
// errors.
func runEnded(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

func closedLoop(ctx context.Context, e *env, label string, clients int, newClient func(i int) opFunc) *outcome {
	ops := make([]opFunc, clients)
	for i := range ops {
		ops[i] = newClient(i)
	}
	runCtx, cancel := ctx, context.CancelFunc(func() {})
	if e.cfg.duration > 0 {
		runCtx, cancel = context.WithTimeout(ctx, e.cfg.duration)
	}
	defer cancel()

	var started atomic.Int64
	var errorsLogged atomic.Int32
	var firstErr atomic.Pointer[string]
	hists := make([]latency.Histogram, clients)
	errCounts := make([]int64, clients)
	var wg sync.WaitGroup
	begin := time.Now()
	for i := range clients {
		wg.Go(func() {
			for !runEnded(runCtx) {
				if e.cfg.total > 0 && started.Add(1) > e.cfg.total {
					return
				}
				opCtx, opCancel := context.WithTimeout(runCtx, e.cfg.OpTimeout)
				t0 := time.Now()
				err := ops[i](opCtx)
				d := time.Since(t0)
				opCancel()
				switch {
				case err == nil:
					hists[i].Record(d)
				case errors.Is(err, errNoMoreWork):
					return
				case runEnded(runCtx):
					// Cut short by the end of the run: neither an operation nor an error.
				default:
					errCounts[i]++
					msg := err.Error()
					firstErr.CompareAndSwap(nil, &msg)
					if errorsLogged.Add(1) <= 3 {
						e.log.Warn("operation failed", "target", e.t.name, "workload", label, "error", err)
					}
				}
			}
		})
	}
	wg.Wait()
	out := &outcome{elapsed: time.Since(begin)}
	for i := range hists {
		out.hist.Merge(&hists[i])
		out.errors += errCounts[i]
	}
	out.ops = int64(out.hist.Count())
	if p := firstErr.Load(); p != nil {
		out.firstErr = *p
	}
	return out
}

// result builds a report row from a closed-loop outcome.
func (o *outcome) result(e *env, s spec) result {
	r := newResult(e.t.name, s, o.ops, o.elapsed, &o.hist, o.errors)
	r.FirstError = o.firstErr
	return r
}
