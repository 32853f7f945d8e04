package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/kite-db/kite/pkg/mvcc"
)

// callTimeout bounds every call to the Store: a hung call fails the run
// with the request that hung instead of stalling the test binary.
const callTimeout = 30 * time.Second

// harness drives one run: it sends each request to the Store and to the
// model, compares the answers, and checks every read now and then.
type harness struct {
	t    *testing.T
	seed uint64
	cfg  config
	rng  *rand.Rand
	m    *model
	g    *gen
	b    mvcc.Backend
	s    *mvcc.Store
	step int
	// ops logs every write sent and its answer, for the failure report:
	// with the seed it says what led to a failure without a replay.
	ops []string
	// hashes remembers HashKV's answers (hash.go).
	hashes map[hashAt]hashSeen
	// pending holds the next pages of lists walked part way (check.go).
	pending []*pb.RangeRequest
	stats   stats
}

// stats count what a run checked, logged at its end: a run that passes
// says how much it proved.
type stats struct {
	writes, refused, reads, checks, events, reopens int
}

func newHarness(t *testing.T, seed uint64, cfg config, b mvcc.Backend) *harness {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	m := newModel()
	h := &harness{t: t, seed: seed, cfg: cfg, rng: rng, m: m, g: newGen(rng, m), b: b, hashes: map[hashAt]hashSeen{}}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("storetest seed %d: the writes before the failure (step: request → answer):\n%s", seed, strings.Join(h.ops, "\n"))
		}
	})
	return h
}

func (h *harness) run() {
	h.openStore()
	reopenAt := -1
	if h.cfg.reopen != nil {
		reopenAt = h.cfg.steps/4 + h.rng.IntN(h.cfg.steps/2+1)
	}
	nextCheck := 1 + h.rng.IntN(8)
	for h.step = 1; h.step <= h.cfg.steps; h.step++ {
		h.randomWrite()
		if h.step == nextCheck {
			h.checkAll(false)
			nextCheck += 4 + h.rng.IntN(12)
		}
		if h.cfg.reopen != nil && (h.step == reopenAt || h.rng.IntN(80) == 0) {
			h.reopen()
			h.checkAll(false)
		}
	}
	h.step = h.cfg.steps
	h.checkAll(true)
	if h.cfg.reopen != nil {
		h.reopen()
		h.checkAll(true)
	}
	if err := h.s.Close(); err != nil {
		h.fatalf("close store: %v", err)
	}
	st := h.stats
	h.t.Logf("storetest seed %d: %d writes (%d refused as etcd refuses them) up to revision %d, compacted %d; %d checks of %d reads and %d watch events; %d restarts",
		h.seed, st.writes, st.refused, h.m.current, h.m.compacted, st.checks, st.reads, st.events, st.reopens)
}

// openStore opens a Store over h.b. Half the Stores keep a watch ring too
// small for more than a revision or two, so that watchers are served from
// the log as well as from memory.
func (h *harness) openStore() {
	cfg := mvcc.Config{}
	if h.rng.IntN(2) == 0 {
		cfg.WatchRingBytes = 2 << 10
	}
	ctx, cancel := h.ctx()
	defer cancel()
	s, err := mvcc.Open(ctx, h.b, cfg)
	if err != nil {
		h.fatalf("open store: %v", err)
	}
	// Registered after the backend's own cleanup, so it runs first: a
	// failed run closes the Store before its storage.
	h.t.Cleanup(func() { _ = s.Close() })
	h.s = s
	ring := "the default watch ring"
	if cfg.WatchRingBytes > 0 {
		ring = fmt.Sprintf("a watch ring of %d bytes", cfg.WatchRingBytes)
	}
	h.ops = append(h.ops, fmt.Sprintf("%d: open a store with %s", h.step, ring))
}

func (h *harness) reopen() {
	h.stats.reopens++
	if err := h.s.Close(); err != nil {
		h.fatalf("close store: %v", err)
	}
	h.b = h.cfg.reopen(h.t, h.b)
	h.openStore()
}

func (h *harness) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(h.t.Context(), callTimeout)
}

// randomWrite makes one random write. Compactions come more often while
// many revisions are uncompacted, as with an auto-compacting cluster: each
// check reads every uncompacted revision, so that bounds its cost.
func (h *harness) randomWrite() {
	defer h.checkRevisions()
	if h.m.current-h.m.compacted > 100 && h.rng.IntN(8) == 0 {
		h.write(h.g.compaction())
		return
	}
	switch x := h.rng.IntN(100); {
	case x < 36:
		h.write(h.g.put(true))
	case x < 48:
		h.write(h.g.deleteRange())
	case x < 70:
		h.write(h.g.txn(2, false))
	case x < 74:
		h.write(h.g.txn(1, true)) // served as a read, from a snapshot
	case x < 79:
		h.write(h.g.compaction())
	case x < 86:
		h.write(h.g.grant())
	case x < 90:
		h.write(h.g.revoke())
	default:
		h.concurrent(h.g.independentWrites())
	}
}

// write sends req to the Store and the model and compares the answers.
func (h *harness) write(req proto.Message) {
	h.ops = append(h.ops, fmt.Sprintf("%d: %s", h.step, describe(req)))
	got, err := h.call(req)
	h.ops[len(h.ops)-1] += " → " + answer(got, err)
	var assigned int64
	if g, ok := got.(*pb.LeaseGrantResponse); ok && err == nil {
		assigned = g.ID
	}
	want, wantErr := h.m.apply(req, assigned)
	h.expect(req, got, err, want, wantErr)
	h.stats.writes++
	if wantErr != nil {
		h.stats.refused++
	}
}

// concurrent sends writes that touch distinct keys all at once, so that
// they can share a commit, and applies them to the model in the order of
// the revisions the Store answered: any order is right, but each must get
// a revision of its own, one after the other.
func (h *harness) concurrent(reqs []proto.Message) {
	type result struct {
		resp proto.Message
		err  error
	}
	res := make([]result, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Go(func() { res[i].resp, res[i].err = h.call(r) })
	}
	wg.Wait()
	order := make([]int, len(reqs))
	for i := range order {
		order[i] = i
		h.ops = append(h.ops, fmt.Sprintf("%d: at once: %s → %s", h.step, describe(reqs[i]), answer(res[i].resp, res[i].err)))
	}
	rev := func(i int) int64 {
		if res[i].err != nil {
			return 0
		}
		return res[i].resp.(interface{ GetHeader() *pb.ResponseHeader }).GetHeader().GetRevision()
	}
	slices.SortStableFunc(order, func(a, b int) int { return int(rev(a) - rev(b)) })
	for _, i := range order {
		want, wantErr := h.m.apply(reqs[i], 0)
		h.expect(reqs[i], res[i].resp, res[i].err, want, wantErr)
	}
	h.stats.writes += len(reqs)
}

// call sends req to the Store.
func (h *harness) call(req proto.Message) (proto.Message, error) {
	ctx, cancel := h.ctx()
	defer cancel()
	var (
		resp proto.Message
		err  error
	)
	switch r := req.(type) {
	case *pb.PutRequest:
		resp, err = h.s.Put(ctx, r)
	case *pb.DeleteRangeRequest:
		resp, err = h.s.DeleteRange(ctx, r)
	case *pb.TxnRequest:
		resp, err = h.s.Txn(ctx, r)
	case *pb.CompactionRequest:
		resp, err = h.s.Compact(ctx, r)
	case *pb.LeaseGrantRequest:
		resp, err = h.s.LeaseGrant(ctx, r)
	case *pb.LeaseRevokeRequest:
		resp, err = h.s.LeaseRevoke(ctx, r)
	case *pb.RangeRequest:
		resp, err = h.s.Range(ctx, r)
	case *pb.LeaseLeasesRequest:
		resp, err = h.s.LeaseLeases(ctx, r)
	case *pb.LeaseTimeToLiveRequest:
		resp, err = h.s.LeaseTimeToLive(ctx, r)
	default:
		panic(fmt.Sprintf("storetest: cannot send %T", req))
	}
	if err != nil {
		// The typed nil a method returns with its error is no answer.
		return nil, err
	}
	return resp, nil
}

// expect compares the Store's answer to req with the model's.
func (h *harness) expect(req, got proto.Message, gotErr error, want proto.Message, wantErr error) {
	h.t.Helper()
	switch {
	case wantErr != nil:
		if !errors.Is(gotErr, wantErr) {
			h.fatalf("%s\nanswered %s\nthe model (etcd) refuses it: %v", describe(req), answer(got, gotErr), wantErr)
		}
	case gotErr != nil:
		h.fatalf("%s\nfailed: %v\nthe model (etcd) answers %s", describe(req), gotErr, text(want))
	case !proto.Equal(want, got):
		h.fatalf("%s\nthe answer differs from the model's (etcd's) (-model +store):\n%s", describe(req), diff(want, got))
	}
}

// diff explains why two answers proto.Equal found different (it is much
// faster than cmp.Diff, which only runs once the answers differ).
func diff(want, got any) string {
	return cmp.Diff(want, got, protocmp.Transform())
}

// checkRevisions: the Store's idea of its revisions is the model's after
// every write, failed ones included (they change nothing).
func (h *harness) checkRevisions() {
	h.t.Helper()
	if cur, comp := h.s.Revisions(); cur != h.m.current || comp != h.m.compacted {
		h.fatalf("Revisions() = current %d, compacted %d; the model has %d, %d", cur, comp, h.m.current, h.m.compacted)
	}
}

// fatalf stops the run. Every message names the seed, how to replay it and
// where in the run it failed.
func (h *harness) fatalf(format string, args ...any) {
	h.t.Helper()
	h.t.Fatalf("storetest seed %d, step %d of %d (revision %d, compacted %d):\n%s\nreplay: %s=%d go test -run '%s'",
		h.seed, h.step, h.cfg.steps, h.m.current, h.m.compacted, fmt.Sprintf(format, args...), SeedEnv, h.seed, h.t.Name())
}

// describe names a request and its fields on one line.
func describe(m proto.Message) string {
	return string(m.ProtoReflect().Descriptor().Name()) + "{" + text(m) + "}"
}

func text(m proto.Message) string {
	if m == nil {
		return "<nil>"
	}
	return prototext.MarshalOptions{}.Format(m)
}

func answer(resp proto.Message, err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	return text(resp)
}
