package storetest

import (
	"crypto/sha256"
	"errors"

	"github.com/kite-db/kite/pkg/mvcc"
)

// hashAt is what a HashKV answer is a function of: the revision hashed
// and the compacted revision (etcd hashes only what compaction keeps).
type hashAt struct{ rev, compacted int64 }

// hashSeen is a HashKV answer and the model's rows it covered.
type hashSeen struct {
	hash uint32
	kept [sha256.Size]byte // of model.kept
	step int
}

// checkHashes asks HashKV at a few revisions and holds the Store to what
// etcd's corruption check relies on: the hash at a revision never changes
// while the compacted revision stays (later writes, a background physical
// compaction, a restart), and a compaction that drops rows the hash covered
// changes it. The hash itself is kite's and is not compared with etcd's.
//
// Not held: that a compaction dropping no row leaves the hash alone, which
// etcd's does (it hashes the kept rows in revision order) but kite's need
// not (it hashes the rows alive at the compacted revision in key order);
// members compare hashes at the same compacted revision, so only the
// properties above matter to them.
func (h *harness) checkHashes(thorough bool) {
	h.t.Helper()
	lo := max(h.m.compacted, 1)
	revs := []int64{0, h.m.current, lo}
	n := 2
	if thorough {
		n = 8
	}
	for range n {
		revs = append(revs, lo+h.rng.Int64N(h.m.current-lo+1))
	}
	for _, rev := range revs {
		h.hashAt(rev)
	}
	h.hashRefused(h.m.current+1, mvcc.ErrFutureRev)
	if h.m.compacted > 1 {
		h.hashRefused(h.m.compacted-1, mvcc.ErrCompacted)
	}
}

func (h *harness) hashAt(rev int64) {
	h.t.Helper()
	ctx, cancel := h.ctx()
	defer cancel()
	resp, err := h.s.HashKV(ctx, rev)
	if err != nil {
		h.fatalf("HashKV(%d): %v", rev, err)
	}
	at := rev
	if at == 0 {
		at = h.m.current
	}
	compactRev := h.m.compacted
	if compactRev == 0 {
		compactRev = -1
	}
	if resp.HashRevision != at || resp.CompactRevision != compactRev || resp.GetHeader().GetRevision() != h.m.current {
		h.fatalf("HashKV(%d) = %s; want hash revision %d, compact revision %d, header revision %d",
			rev, text(resp), at, compactRev, h.m.current)
	}
	key := hashAt{at, h.m.compacted}
	kept := sha256.Sum256([]byte(h.m.kept(at, h.m.compacted)))
	if seen, ok := h.hashes[key]; ok {
		if seen.hash != resp.Hash {
			h.fatalf("HashKV(%d) with compacted revision %d = %d; it was %d at step %d", rev, h.m.compacted, resp.Hash, seen.hash, seen.step)
		}
		return
	}
	for k, seen := range h.hashes {
		if k.rev == at && seen.kept != kept && seen.hash == resp.Hash {
			h.fatalf("HashKV(%d) = %d both with compacted revision %d and %d, though the compaction dropped rows it covered",
				at, resp.Hash, k.compacted, h.m.compacted)
		}
	}
	h.hashes[key] = hashSeen{hash: resp.Hash, kept: kept, step: h.step}
}

func (h *harness) hashRefused(rev int64, want error) {
	h.t.Helper()
	ctx, cancel := h.ctx()
	defer cancel()
	resp, err := h.s.HashKV(ctx, rev)
	if !errors.Is(err, want) {
		if err == nil {
			h.fatalf("HashKV(%d) = %s; want %v", rev, text(resp), want)
		}
		h.fatalf("HashKV(%d): %v; want %v", rev, err, want)
	}
}
