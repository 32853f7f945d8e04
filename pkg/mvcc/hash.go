package mvcc

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash"
	"hash/crc32"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// hashChunk bounds the rows read per query while hashing.
const hashChunk = 4096

// HashKV hashes every stored row with a revision <= rev (0: current), as
// etcd's HashKV hashes its key bucket. Replicas that applied the same
// requests and compacted to the same revision produce the same hash.
func (s *Store) HashKV(ctx context.Context, rev int64) (*pb.HashKVResponse, error) {
	tx, current, compacted, err := s.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	if rev, err = checkRevision(rev, current, compacted); err != nil {
		return nil, err
	}
	h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	for from := int64(1); from <= rev; {
		rows, err := tx.Changes(ctx, from, rev, hashChunk, false)
		if err != nil {
			return nil, fmt.Errorf("read rows for hash: %w", err)
		}
		if len(rows) < hashChunk {
			hashRows(h, rows)
			break
		}
		// The chunk may end inside a revision: hash the whole revisions and
		// start the next chunk at the partial one.
		last := rows[len(rows)-1].KV.ModRevision
		if rows[0].KV.ModRevision == last {
			if rows, err = tx.Changes(ctx, last, last, 0, false); err != nil {
				return nil, fmt.Errorf("read revision %d for hash: %w", last, err)
			}
			hashRows(h, rows)
			from = last + 1
			continue
		}
		n := len(rows)
		for rows[n-1].KV.ModRevision == last {
			n--
		}
		hashRows(h, rows[:n])
		from = last
	}
	return &pb.HashKVResponse{
		Header:          &pb.ResponseHeader{Revision: current},
		Hash:            h.Sum32(),
		CompactRevision: compacted,
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
