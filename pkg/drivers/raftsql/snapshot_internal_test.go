package raftsql

import (
	"testing"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// The entries kept after a snapshot are bounded by their size as well as
// by their count: a load of large values must not stay in memory.
func TestKeepWithinCatchUpBytes(t *testing.T) {
	n := &Node{raftLoop: raftLoop{storage: raft.NewMemoryStorage()}, cfg: Config{CatchUpBytes: 10 << 10}}
	var ents []*raftpb.Entry
	for i := uint64(1); i <= 100; i++ {
		ents = append(ents, &raftpb.Entry{Index: proto.Uint64(i), Term: proto.Uint64(1), Data: make([]byte, 1<<10)})
	}
	if err := n.storage.Append(ents); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ applied, keep, want uint64 }{
		{100, 50, 10},  // 10 entries of 1 KiB fill 10 KiB
		{100, 5, 5},    // fewer by count
		{100, 500, 10}, // more than the log holds
		{100, 0, 0},
		{40, 50, 10},
	} {
		if got := n.keepWithin(c.applied, c.keep); got != c.want {
			t.Errorf("keepWithin(%d, %d) = %d, want %d", c.applied, c.keep, got, c.want)
		}
	}
	// An entry larger than the bound is kept alone.
	n.cfg.CatchUpBytes = 100
	if got := n.keepWithin(100, 50); got != 1 {
		t.Errorf("keepWithin with entries larger than the bound = %d, want 1", got)
	}
}
