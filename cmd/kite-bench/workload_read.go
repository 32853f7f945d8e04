package main

import (
	"context"
	"fmt"
	"math/rand/v2"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// listPageLimit is kube-apiserver's page size for paginated lists.
const listPageLimit = 500

// runGet: single-key reads of the preloaded keys, linearizable, or
// serializable for get-serializable (a read served from the local state
// without the consensus round trip).
func runGet(ctx context.Context, e *env, s spec) (result, error) {
	if err := e.ensureData(ctx); err != nil {
		return result{}, err
	}
	var opts []clientv3.OpOption
	if s.name == "get-serializable" {
		opts = append(opts, clientv3.WithSerializable())
	}
	prefix := e.dataPrefix()
	out := closedLoop(ctx, e, s.label, s.clients, func(i int) opFunc {
		kv := e.conn(i)
		rng := rand.New(rand.NewPCG(uint64(i), 4))
		return func(ctx context.Context) error {
			k := key(prefix, rng.IntN(e.cfg.keys))
			resp, err := kv.Get(ctx, k, opts...)
			if err != nil {
				return err
			}
			if len(resp.Kvs) != 1 {
				return fmt.Errorf("get %s: %d keys, want 1", k, len(resp.Kvs))
			}
			return nil
		}
	})
	return out.result(e, s), nil
}

// runList: one operation is a full paginated list of the preloaded keys as
// kube-apiserver pages (see pagedList).
func runList(ctx context.Context, e *env, s spec) (result, error) {
	if err := e.ensureData(ctx); err != nil {
		return result{}, err
	}
	out := closedLoop(ctx, e, s.label, s.clients, pagedList(e))
	return out.result(e, s), nil
}

// pagedList returns list's clients: each operation is a full list of the
// preloaded keys as kube-apiserver pages, limit 500, the first page at the
// latest revision, every further page at that same revision and starting
// just after the previous page's last key.
func pagedList(e *env) func(i int) opFunc {
	prefix := e.dataPrefix()
	end := clientv3.GetPrefixRangeEnd(prefix)
	return func(i int) opFunc {
		kv := e.conn(i)
		return func(ctx context.Context) error {
			var rev int64
			n, start := 0, prefix
			for {
				opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(listPageLimit)}
				if rev != 0 {
					opts = append(opts, clientv3.WithRev(rev))
				}
				resp, err := kv.Get(ctx, start, opts...)
				if err != nil {
					return fmt.Errorf("list page %d: %w", n/listPageLimit, err)
				}
				if rev == 0 {
					rev = resp.Header.Revision
				}
				n += len(resp.Kvs)
				if !resp.More || len(resp.Kvs) == 0 {
					break
				}
				start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
			}
			return wantKeys("list", n, e.cfg.keys)
		}
	}
}

// runListAll: one operation is an unpaginated list of every preloaded key
// in one Range (limit 0), as a client that does not page asks: the server
// must hold and send the whole answer at once, which is where its memory
// and its time per key show.
func runListAll(ctx context.Context, e *env, s spec) (result, error) {
	if err := e.ensureData(ctx); err != nil {
		return result{}, err
	}
	prefix := e.dataPrefix()
	end := clientv3.GetPrefixRangeEnd(prefix)
	out := closedLoop(ctx, e, s.label, s.clients, func(i int) opFunc {
		kv := e.conn(i)
		return func(ctx context.Context) error {
			resp, err := kv.Get(ctx, prefix, clientv3.WithRange(end))
			if err != nil {
				return fmt.Errorf("unpaginated list: %w", err)
			}
			if resp.More {
				return fmt.Errorf("unpaginated list: %d keys and more, want all %d", len(resp.Kvs), e.cfg.keys)
			}
			return wantKeys("unpaginated list", len(resp.Kvs), e.cfg.keys)
		}
	})
	return out.result(e, s), nil
}

// runListStream: one operation is a full list of the preloaded keys through
// RangeStream, as kube-apiserver 1.37 lists by default.
func runListStream(ctx context.Context, e *env, s spec) (result, error) {
	if err := e.ensureData(ctx); err != nil {
		return result{}, err
	}
	prefix := e.dataPrefix()
	end := clientv3.GetPrefixRangeEnd(prefix)
	out := closedLoop(ctx, e, s.label, s.clients, func(i int) opFunc {
		kv := e.conn(i)
		return func(ctx context.Context) error {
			// Cancelling on return stops clientv3's stream goroutine even when
			// the loop below leaves early.
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			ch, err := kv.GetStream(ctx, prefix, clientv3.WithRange(end))
			if err != nil {
				return fmt.Errorf("range stream: %w", err)
			}
			n := 0
			for chunk := range ch {
				if err := chunk.Err(); err != nil {
					return fmt.Errorf("range stream: %w", err)
				}
				n += len(chunk.Kvs)
			}
			return wantKeys("range stream", n, e.cfg.keys)
		}
	})
	return out.result(e, s), nil
}

// runCount: count-only over the preloaded prefix (kube-apiserver's object
// count for its storage metrics).
func runCount(ctx context.Context, e *env, s spec) (result, error) {
	if err := e.ensureData(ctx); err != nil {
		return result{}, err
	}
	prefix := e.dataPrefix()
	out := closedLoop(ctx, e, s.label, s.clients, func(i int) opFunc {
		kv := e.conn(i)
		return func(ctx context.Context) error {
			resp, err := kv.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil {
				return err
			}
			return wantKeys("count", int(resp.Count), e.cfg.keys)
		}
	})
	return out.result(e, s), nil
}

// wantKeys turns a wrong answer into an error: a fast wrong list must not
// count as a fast list.
func wantKeys(what string, got, want int) error {
	if got != want {
		return fmt.Errorf("%s returned %d keys, want %d", what, got, want)
	}
	return nil
}
