package mvcc

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash"
	"hash/crc32"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// HashKV hashes every stored row with a revision <= rev (0: current), as
// etcd's HashKV hashes its key bucket. Replicas that applied the same
// requests and compacted to the same revision produce the same hash.
func (s *Store) HashKV(ctx context.Context, rev int64) (*pb.HashKVResponse, error) {
	tx, current, compacted, err := s.beginRead(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	if rev, err = checkRevision(rev, current, compacted); err != nil {
		return nil, err
	}
	h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	// Up to the compacted revision only what compaction keeps counts (the
	// rows alive at it), as in etcd: the hash must not depend on how far
	// this member's background removal of the other rows has got, or
	// members that agree would look corrupt to each other.
	if compacted > 0 {
		if err := hashAlive(ctx, tx, h, compacted); err != nil {
			return nil, fmt.Errorf("hash: %w", err)
		}
	}
	err = eachChunk(ctx, tx, compacted+1, rev, false, func(rows []Change) error {
		hashRows(h, rows)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("hash: %w", err)
	}
	return &pb.HashKVResponse{
		Header:          &pb.ResponseHeader{Revision: current},
		Hash:            h.Sum32(),
		CompactRevision: etcdCompacted(compacted),
		HashRevision:    rev,
	}, nil
}

func hashRows(h hash.Hash32, rows []Change) {
	var buf [8]byte
	for _, c := range rows {
		kv := c.KV
		for _, n := range []int64{kv.ModRevision, c.Sub, kv.CreateRevision, kv.Version, kv.Lease} {
			binary.BigEndian.PutUint64(buf[:], uint64(n))
			h.Write(buf[:])
		}
		h.Write(kv.Key)
		h.Write(kv.Value)
	}
}

// hashAlive hashes the keys alive at revision rev in key order, a page at
// a time.
func hashAlive(ctx context.Context, tx ReadTx, h hash.Hash32, rev int64) error {
	const page = 1000
	from := []byte{}
	for {
		kvs, err := tx.Range(ctx, from, []byte{0}, rev, page, false)
		if err != nil {
			return err
		}
		rows := make([]Change, len(kvs))
		for i, kv := range kvs {
			rows[i] = Change{KV: kv}
		}
		hashRows(h, rows)
		if len(kvs) < page {
			return nil
		}
		from = KeyAfter(kvs[len(kvs)-1].Key)
	}
}
