package memtail

import (
	"context"
	"fmt"
	"hash/maphash"

	"github.com/kite-db/kite/pkg/mvcc"
)

// liveKeys knows every live key by a hash of it, so that the writer can
// tell a key that is certainly not live (a creation: a load, a
// kube-apiserver create) without a read of the base. The row cache
// cannot: it holds only keys touched lately. etcd answers the same
// question from its in-memory key index; this holds 8 bytes and a count
// per key instead of the key and its revisions, because the writer needs
// only "certainly not" or "maybe": a key whose hash it holds is read as
// before.
//
// A count per hash keeps it exact when two live keys share one. Like the
// row cache it is the writer's alone (changed only under the write lock,
// once a transaction committed) and relies on every change of the base
// going through this Backend. A count may be too high, never too low:
// where a change's outcome is unknown (a commit that failed half-way) the
// keys it may have created are added and none removed, which costs a read
// later, never a wrong answer.
type liveKeys struct {
	seed maphash.Seed
	n    map[uint64]uint32
}

// liveKeysPage is how many keys one statement reads when the set is built.
const liveKeysPage = 10000

// loadLiveKeys reads every live key of base. It runs in Open, after the
// log is replayed and before the first write, so the tail is empty and the
// base's state is the whole state. A million keys take 20 to 40 MB (a Go
// map of 8-byte hashes, as full as its last growth left it).
func loadLiveKeys(ctx context.Context, base mvcc.Backend) (*liveKeys, error) {
	s := &liveKeys{seed: maphash.MakeSeed(), n: map[uint64]uint32{}}
	tx, err := base.BeginRead(ctx)
	if err != nil {
		return nil, fmt.Errorf("memtail: read the live keys: %w", err)
	}
	defer tx.Rollback()
	cur, _, err := tx.Revisions(ctx)
	if err != nil || cur == 0 {
		return s, err
	}
	from := []byte{0}
	for {
		kvs, err := tx.Range(ctx, from, []byte{0}, cur, liveKeysPage, true)
		if err != nil {
			return nil, fmt.Errorf("memtail: read the live keys: %w", err)
		}
		for _, kv := range kvs {
			s.add(string(kv.Key))
		}
		if len(kvs) < liveKeysPage {
			return s, nil
		}
		from = append(append([]byte(nil), kvs[len(kvs)-1].Key...), 0)
	}
}

func (s *liveKeys) hash(key string) uint64 { return maphash.String(s.seed, key) }

// mayHold says false only if key is certainly not live.
func (s *liveKeys) mayHold(key string) bool { return s.n[s.hash(key)] > 0 }

func (s *liveKeys) add(key string) { s.n[s.hash(key)]++ }

func (s *liveKeys) remove(key string) {
	h := s.hash(key)
	switch c := s.n[h]; {
	case c > 1:
		s.n[h] = c - 1
	case c == 1:
		delete(s.n, h)
	}
}

// changed records what a committed transaction did to the keys it
// changed: before is each key's liveness before the transaction, and
// after reports it now. With certain false (the commit's outcome is not
// known) only creations are recorded.
func (s *liveKeys) changed(before map[string]bool, after func(string) bool, certain bool) {
	for k, was := range before {
		switch is := after(k); {
		case is && !was:
			s.add(k)
		case was && !is && certain:
			s.remove(k)
		}
	}
}
