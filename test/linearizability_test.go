package test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A register per key: the linearizability model of the operations the
// test sends. State and outputs carry the mod revision too, so a read must
// return exactly the revision of the write it observes.
type regInput struct {
	key  string
	op   string // "get", "put", "cas"
	val  string // put, cas: the new value
	from string // cas: the value compared
}

type regOutput struct {
	val     string
	rev     int64 // get: mod revision of the value (0: no key); put, cas: revision written
	ok      bool  // cas: the compare held
	unknown bool  // the request failed: it may or may not have taken effect
}

type regState struct {
	val string
	rev int64 // -1: written by a request whose answer was lost
}

var registerModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range h {
			k := op.Input.(regInput).key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		var out [][]porcupine.Operation
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return regState{} },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(regState), input.(regInput), output.(regOutput)
		written := func() regState {
			if out.unknown {
				return regState{val: in.val, rev: -1}
			}
			return regState{val: in.val, rev: out.rev}
		}
		switch in.op {
		case "get":
			if s.rev == -1 {
				return out.val == s.val && out.rev > 0, regState{val: s.val, rev: out.rev}
			}
			return out.val == s.val && out.rev == s.rev, s
		case "put":
			if out.unknown {
				return true, written()
			}
			return out.rev > s.rev, written()
		case "cas":
			if out.unknown {
				if s.val == in.from {
					return true, written()
				}
				return true, s
			}
			if out.ok != (s.val == in.from) {
				return false, s
			}
			if !out.ok {
				return true, s
			}
			return out.rev > s.rev, written()
		}
		return false, s
	},
	Equal: func(a, b any) bool { return a.(regState) == b.(regState) },
	DescribeOperation: func(input, output any) string {
		in, out := input.(regInput), output.(regOutput)
		return fmt.Sprintf("%s(%s %q %q) -> %+v", in.op, in.key, in.from, in.val, out)
	},
}

// TestRegisterModelRejectsStaleRead proves the model can fail: a read that
// returns the old value after a write has returned is not linearizable.
func TestRegisterModelRejectsStaleRead(t *testing.T) {
	h := []porcupine.Operation{
		{ClientId: 0, Input: regInput{key: "k", op: "put", val: "1"}, Call: 0, Output: regOutput{rev: 2}, Return: 10},
		{ClientId: 1, Input: regInput{key: "k", op: "put", val: "2"}, Call: 20, Output: regOutput{rev: 3}, Return: 30},
		{ClientId: 0, Input: regInput{key: "k", op: "get"}, Call: 40, Output: regOutput{val: "1", rev: 2}, Return: 50},
	}
	if porcupine.CheckOperations(registerModel, h) {
		t.Fatal("a stale read was accepted as linearizable")
	}
	h[2].Output = regOutput{val: "2", rev: 3}
	if !porcupine.CheckOperations(registerModel, h) {
		t.Fatal("a fresh read was rejected")
	}
}

// TestSharedServersLinearizable: clients spread over three kite servers on
// one database send gets, puts and compare-and-swap txns on a few keys; the
// history, with mod revisions, must be linearizable (porcupine).
func TestSharedServersLinearizable(t *testing.T) {
	forEachSharedKind(t, sharedServersLinearizable)
}

func sharedServersLinearizable(t *testing.T, kind string) {
	checkLinearizable(t, startShared(t, kind, 3))
}

// checkLinearizable runs 9 clients spread over the servers ks, each a
// sequence of gets, puts and compare-and-swaps on three keys, and has
// porcupine check the history.
func checkLinearizable(t *testing.T, ks []*kiteProcess) {
	t.Helper()
	ctx := testCtx(t, 2*time.Minute)
	const clients, opsPerClient = 9, 150
	keys := []string{"/lin/a", "/lin/b", "/lin/c"}
	h := newRegHistory()
	var wg sync.WaitGroup
	for id := range clients {
		wg.Go(func() {
			c, err := newClient(ks[id%len(ks)].Endpoint)
			if err != nil {
				t.Errorf("client %d: %v", id, err)
				return
			}
			defer c.Close()
			rc := h.client(id, c, 7)
			for n := range opsPerClient {
				rc.step(ctx, keys, n)
			}
		})
	}
	wg.Wait()
	history := h.ops
	res := porcupine.CheckOperationsTimeout(registerModel, history, time.Minute)
	switch res {
	case porcupine.Ok:
		t.Logf("%d operations over %d servers: linearizable", len(history), len(ks))
	case porcupine.Unknown:
		t.Fatalf("porcupine could not decide in time on %d operations", len(history))
	default:
		t.Fatalf("history of %d operations is not linearizable", len(history))
	}
}

// regHistory records the register operations of concurrent clients, with
// call and return times since it started.
type regHistory struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
}

func newRegHistory() *regHistory { return &regHistory{start: time.Now()} }

func (h *regHistory) now() int64 { return int64(time.Since(h.start)) }

// client returns client id's operation source, its random choices seeded.
func (h *regHistory) client(id int, c *clientv3.Client, seed uint64) *regClient {
	return &regClient{id: id, c: c, h: h, rng: rand.New(rand.NewPCG(uint64(id), seed)), seen: map[string]string{}}
}

// regClient sends one client's random gets, puts and compare-and-swaps.
type regClient struct {
	id   int
	c    *clientv3.Client
	h    *regHistory
	rng  *rand.Rand
	seen map[string]string // the last value this client read or wrote, per key
}

// step sends the client's n-th operation, on one of keys, and records it.
// A failed read changes nothing and is left out; a failed write may have
// happened, so its outcome is unknown (it may take effect any time later).
func (rc *regClient) step(ctx context.Context, keys []string, n int) {
	in := regInput{key: keys[rc.rng.IntN(len(keys))], val: fmt.Sprintf("c%d-%d", rc.id, n)}
	switch r := rc.rng.IntN(10); {
	case r < 5:
		in.op = "get"
	case r < 8:
		in.op = "put"
	case rc.seen[in.key] != "":
		// A value compare on a missing key fails in etcd: swap only from a
		// value that existed.
		in.op, in.from = "cas", rc.seen[in.key]
	default:
		in.op = "put"
	}
	call := rc.h.now()
	out, err := doRegister(ctx, rc.c, in)
	ret := rc.h.now()
	if err != nil {
		if in.op == "get" {
			return
		}
		out, ret = regOutput{unknown: true}, math.MaxInt64
	}
	if in.op == "get" {
		rc.seen[in.key] = out.val
	} else if !out.unknown && (in.op == "put" || out.ok) {
		rc.seen[in.key] = in.val
	}
	rc.h.mu.Lock()
	rc.h.ops = append(rc.h.ops, porcupine.Operation{ClientId: rc.id, Input: in, Call: call, Output: out, Return: ret})
	rc.h.mu.Unlock()
}

func doRegister(ctx context.Context, c *clientv3.Client, in regInput) (regOutput, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	switch in.op {
	case "get":
		resp, err := c.Get(ctx, in.key)
		if err != nil {
			return regOutput{}, err
		}
		if len(resp.Kvs) == 0 {
			return regOutput{}, nil
		}
		return regOutput{val: string(resp.Kvs[0].Value), rev: resp.Kvs[0].ModRevision}, nil
	case "put":
		resp, err := c.Put(ctx, in.key, in.val)
		if err != nil {
			return regOutput{}, err
		}
		return regOutput{rev: resp.Header.Revision}, nil
	default:
		resp, err := c.Txn(ctx).
			If(clientv3.Compare(clientv3.Value(in.key), "=", in.from)).
			Then(clientv3.OpPut(in.key, in.val)).
			Commit()
		if err != nil {
			return regOutput{}, err
		}
		return regOutput{ok: resp.Succeeded, rev: resp.Header.Revision}, nil
	}
}
