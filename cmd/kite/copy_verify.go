package main

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"slices"

	"github.com/kite-db/kite/pkg/mvcc"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// checkInTx is a cheap check before commit, in the write transaction:
// the revisions and the key count at R are the source's. A mismatch
// rolls back, leaving the target as it was.
func checkInTx(ctx context.Context, tx mvcc.ReadTx, c copied) error {
	cur, comp, err := tx.Revisions(ctx)
	if err != nil {
		return fmt.Errorf("target: read revisions: %w", err)
	}
	if cur != c.current || comp != c.compacted {
		return fmt.Errorf("target: revisions %d/%d after the copy, want %d/%d", cur, comp, c.current, c.compacted)
	}
	n, err := tx.Count(ctx, []byte{0}, []byte{0}, max(c.current, 1))
	if err != nil {
		return fmt.Errorf("target: count keys: %w", err)
	}
	if n != c.sum.n {
		return fmt.Errorf("target: %d keys at revision %d after the copy, want %d", n, c.current, c.sum.n)
	}
	return nil
}

// verifyTarget reads the committed target back in a new snapshot: its
// revisions, its leases, and the count and hash of every key at R must be
// what the copy read from the source.
func verifyTarget(ctx context.Context, dst mvcc.Backend, c copied) error {
	tx, err := dst.BeginRead(ctx)
	if err != nil {
		return fmt.Errorf("begin read: %w", err)
	}
	defer tx.Rollback()
	cur, comp, err := tx.Revisions(ctx)
	if err != nil {
		return fmt.Errorf("read revisions: %w", err)
	}
	if cur != c.current || comp != c.compacted {
		return fmt.Errorf("target at revision %d compacted %d, want %d compacted %d", cur, comp, c.current, c.compacted)
	}
	leases, err := tx.Leases(ctx)
	if err != nil {
		return fmt.Errorf("read leases: %w", err)
	}
	want := slices.Clone(c.leases)
	slices.SortFunc(want, func(a, b mvcc.Lease) int { return cmp.Compare(a.ID, b.ID) })
	if !slices.Equal(leases, want) {
		return fmt.Errorf("target leases %v, want %v", leases, want)
	}
	got, err := hashAt(ctx, tx, c.current)
	if err != nil {
		return err
	}
	if got.n != c.sum.n || got.hex() != c.sum.hex() {
		return fmt.Errorf("target has %d keys with sha256 %s at revision %d; source had %d keys with sha256 %s",
			got.n, got.hex(), c.current, c.sum.n, c.sum.hex())
	}
	return nil
}

// keysSum is a count and a sha256 of (key, value, create, mod, version,
// lease) of keys in key order, each field length-prefixed so no two
// different sequences hash alike.
type keysSum struct {
	n int64
	h hash.Hash
}

func newKeysSum() keysSum { return keysSum{h: sha256.New()} }

func (s *keysSum) add(kv *mvccpb.KeyValue) {
	var b []byte
	b = binary.AppendUvarint(b, uint64(len(kv.Key)))
	b = append(b, kv.Key...)
	b = binary.AppendUvarint(b, uint64(len(kv.Value)))
	s.h.Write(b)
	s.h.Write(kv.Value)
	b = b[:0]
	for _, v := range []int64{kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease} {
		b = binary.AppendVarint(b, v)
	}
	s.h.Write(b)
	s.n++
}

func (s keysSum) hex() string { return hex.EncodeToString(s.h.Sum(nil)) }

// hashAt sums every key of tx at rev, reading a page at a time.
func hashAt(ctx context.Context, tx mvcc.ReadTx, rev int64) (keysSum, error) {
	s := newKeysSum()
	start := []byte{0}
	for {
		kvs, err := tx.Range(ctx, start, []byte{0}, max(rev, 1), copyPage, false)
		if err != nil {
			return s, fmt.Errorf("read keys at revision %d: %w", rev, err)
		}
		for _, kv := range kvs {
			s.add(kv)
		}
		if len(kvs) < copyPage {
			return s, nil
		}
		start = append(slices.Clone(kvs[len(kvs)-1].Key), 0)
	}
}

// progressTx counts what goes through the target's write calls, for the
// progress lines.
