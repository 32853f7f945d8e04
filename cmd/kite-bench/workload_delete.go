package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// deleteRatePerClient, deleteRateMin and deleteRateMax bound the deletes
// per second that delete loads keys for, per second of --duration, when
// neither --delete-keys nor --total sizes it: 1,024 per client, at least
// 2,048 (one client deletes faster than its share of many) and at most
// 16,384, above the ~10,000 writes/s either server reaches here with 64
// clients. Should a server be faster, the workload ends early, and its
// rate is still right; a fixed count would either run out in a long run or
// make a short one mostly loading.
const (
	deleteRatePerClient = 1024
	deleteRateMin       = 2048
	deleteRateMax       = 16384
)

// deleteKeyCount is how many keys delete loads for spec s: --delete-keys,
// else --total (one key per operation), else enough for --duration.
func deleteKeyCount(cfg *config, s spec) int {
	switch {
	case cfg.deleteKeys > 0:
		return cfg.deleteKeys
	case cfg.total > 0:
		return int(cfg.total)
	default:
		perSecond := min(deleteRateMax, max(deleteRateMin, s.clients*deleteRatePerClient))
		return int(math.Ceil(cfg.duration.Seconds())) * perSecond
	}
}

// prepareDelete loads the keys delete will delete, under the workload's own
// prefix, before its clock starts.
func prepareDelete(ctx context.Context, e *env, s spec) error {
	n := deleteKeyCount(e.cfg, s)
	took, err := loadKeys(ctx, e, s.label+" keys", e.prefix(s.label), n, e.cfg.valSize)
	if err != nil {
		return fmt.Errorf("preload %d keys to delete: %w", n, err)
	}
	e.log.Info("preloaded keys to delete", "target", e.t.name, "workload", s.label, "keys", n, "took", took.Round(time.Millisecond))
	return nil
}

// runDelete: every operation deletes one key that prepareDelete loaded,
// with a single-key Delete, as kube-apiserver deletes an object. Keys are
// taken in a random order (a cluster deletes objects from everywhere in
// its key space, not from one end) and each exactly once, so an answer
// that deleted nothing is a lost key and counts as an error. When every
// key is deleted the run ends early; its rate is over the time it took.
func runDelete(ctx context.Context, e *env, s spec) (result, error) {
	prefix := e.prefix(s.label)
	n := deleteKeyCount(e.cfg, s)
	order := rand.New(rand.NewPCG(uint64(n), 9)).Perm(n)
	var next atomic.Int64
	out := closedLoop(ctx, e, s.label, s.clients, func(i int) opFunc {
		kv := e.conn(i)
		return func(ctx context.Context) error {
			j := next.Add(1) - 1
			if j >= int64(n) {
				return errNoMoreWork
			}
			k := key(prefix, order[j])
			resp, err := kv.Delete(ctx, k)
			if err != nil {
				return fmt.Errorf("delete %s: %w", k, err)
			}
			if resp.Deleted != 1 {
				return fmt.Errorf("delete %s: deleted %d keys, want 1", k, resp.Deleted)
			}
			return nil
		}
	})
	return out.result(e, s), nil
}
