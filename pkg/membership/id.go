package membership

import (
	"crypto/sha1"
	"encoding/binary"
	"slices"
	"strings"
)

// MemberID is etcd's member ID: the first 8 bytes, big-endian, of the
// sha1 of the sorted URLs joined, then salt. etcd salts a member's peer
// URLs with the cluster token, so two clusters bootstrapped with different
// tokens never mistake each other's members (raftsql does the same); a
// single server without peers uses its advertised client URLs and its
// name, so its ID survives restarts and differs between servers. 0 is
// raft's "no member", so it is never returned.
func MemberID(urls []string, salt string) uint64 {
	urls = slices.Clone(urls)
	slices.Sort(urls)
	sum := sha1.Sum([]byte(strings.Join(urls, "") + salt))
	if id := binary.BigEndian.Uint64(sum[:8]); id != 0 {
		return id
	}
	return 1
}

// ClusterID is etcd's cluster ID: the first 8 bytes, big-endian, of the
// sha1 of the sorted member IDs, each 8 bytes big-endian.
func ClusterID(members ...uint64) uint64 {
	ids := slices.Clone(members)
	slices.Sort(ids)
	b := make([]byte, 8*len(ids))
	for i, id := range ids {
		binary.BigEndian.PutUint64(b[8*i:], id)
	}
	sum := sha1.Sum(b)
	return binary.BigEndian.Uint64(sum[:8])
}
