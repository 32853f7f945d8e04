package main

import (
	"context"
	"math/rand/v2"
)

// runPut: every client puts values of --val-size to random keys of a
// --keys key space, back to back. This is the raw durable-write path.
func runPut(ctx context.Context, e *env, s spec) (result, error) {
	prefix := e.prefix(s.label)
	value := makeValue(e.cfg.valSize, 2)
	out := closedLoop(ctx, e, s.label, s.clients, func(i int) opFunc {
		kv := e.conn(i)
		rng := rand.New(rand.NewPCG(uint64(i), 1))
		return func(ctx context.Context) error {
			_, err := kv.Put(ctx, key(prefix, rng.IntN(e.cfg.keys)), value)
			return err
		}
	})
	return out.result(e, s), nil
}
