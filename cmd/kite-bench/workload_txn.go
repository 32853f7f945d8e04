package main

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// runTxnUpdate sends the two transactions kube-apiserver's storage layer
// sends for an object's life: Create is `MOD(key) == 0 ? Put`, and
// GuaranteedUpdate is `MOD(key) == rev ? Put : Get`, where rev is the
// mod revision it last saw. Each client owns a disjoint share of the key
// space, so it first creates each of its keys and then keeps updating them.
func runTxnUpdate(ctx context.Context, e *env, s spec) (result, error) {
	prefix := e.prefix(s.label)
	out := closedLoop(ctx, e, s.label, s.clients, func(i int) opFunc {
		u := newUpdater(e.conn(i), prefix, i, s.clients, e.cfg.keys, makeValue(e.cfg.valSize, uint64(3+i)))
		return u.step
	})
	return out.result(e, s), nil
}

// updater is one client's view of its objects: the mod revision it last
// saw for each key, as kube-apiserver's watch cache would know it.
type updater struct {
	kv   clientv3.KV
	keys []string
	revs []int64 // 0: not created yet
	// unsure marks keys whose last transaction failed without an answer
	// (a timeout): it may have been applied, so the next compare may
	// rightly fail.
	unsure []bool
	next   int
	value  string
}

// newUpdater gives client i of n the keys i, i+n, i+2n, ... below space
// (at least one key, so a small key space still gives every client work).
func newUpdater(kv clientv3.KV, prefix string, i, n, space int, value string) *updater {
	u := &updater{kv: kv, value: value}
	for k := i; k < space || len(u.keys) == 0; k += n {
		u.keys = append(u.keys, key(prefix, k))
	}
	u.revs = make([]int64, len(u.keys))
	u.unsure = make([]bool, len(u.keys))
	return u
}

// step sends one transaction for the next key in turn.
func (u *updater) step(ctx context.Context) error {
	j := u.next % len(u.keys)
	u.next++
	err := u.send(ctx, j)
	var answered *answeredError
	u.unsure[j] = err != nil && !errors.As(err, &answered)
	return err
}

// answeredError is a wrong answer, as opposed to no answer.
type answeredError struct{ error }

func (e *answeredError) Unwrap() error { return e.error }

// send sends the create or update transaction for key j.
func (u *updater) send(ctx context.Context, j int) error {
	k := u.keys[j]
	if u.revs[j] == 0 && !u.unsure[j] {
		resp, err := u.kv.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(k), "=", 0)).
			Then(clientv3.OpPut(k, u.value)).
			Commit()
		if err != nil {
			return fmt.Errorf("create %s: %w", k, err)
		}
		if !resp.Succeeded {
			return &answeredError{fmt.Errorf("create %s: key exists although this client owns it", k)}
		}
		u.revs[j] = resp.Header.Revision
		return nil
	}
	resp, err := u.kv.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(k), "=", u.revs[j])).
		Then(clientv3.OpPut(k, u.value)).
		Else(clientv3.OpGet(k)).
		Commit()
	if err != nil {
		return fmt.Errorf("update %s: %w", k, err)
	}
	if resp.Succeeded {
		u.revs[j] = resp.Header.Revision
		return nil
	}
	// Only this client writes k, so a failed compare means the server lost
	// or misreported a revision (an error), unless the previous transaction
	// on k went unanswered and was applied after all: kube-apiserver's
	// retry with the revision the Else branch returned.
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	was := u.revs[j]
	if len(kvs) != 1 {
		u.revs[j] = 0
		if u.unsure[j] && was == 0 {
			return nil
		}
		return &answeredError{fmt.Errorf("update %s: compare on mod revision %d failed and the key is gone", k, was)}
	}
	u.revs[j] = kvs[0].ModRevision
	if u.unsure[j] {
		return nil
	}
	return &answeredError{fmt.Errorf("update %s: compare on mod revision %d failed, server has %d", k, was, kvs[0].ModRevision)}
}
