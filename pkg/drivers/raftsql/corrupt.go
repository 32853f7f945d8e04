package raftsql

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/raft/v3"
)

// etcd's corruption check: members that applied the same entries must
// hash their key spaces alike at the same revision. The leader compares
// its hash with every member's shortly after start and then every
// CorruptCheckInterval; a member that differs at the same compaction gets
// etcd's CORRUPT alarm, which stops writes until an operator looks.

const pathHashKV = "/kite/hashkv"

// hashStore is what the check needs of the Store: its hash, and the alarm
// it raises.
type hashStore interface {
	HashKV(ctx context.Context, rev int64) (*pb.HashKVResponse, error)
	Alarm(ctx context.Context, r *pb.AlarmRequest) (*pb.AlarmResponse, error)
}

// corruptChecker is the check, on every member: the leader asks, every
// member answers (serveHashKV). Its own type because it needs only the
// Store's hash, the members and the peer client, not raft.
type corruptChecker struct {
	self uint64
	// first is the wait before the first check, interval between the
	// others, timeout the bound of one check.
	first, interval, timeout time.Duration
	log                      *slog.Logger
	store                    hashStore
	cluster                  *memberSet
	peers                    *peerAPI
	// leader is the leader's ID as raft last said (0: none).
	leader func() uint64
}

func (c *corruptChecker) serveHashKV(w http.ResponseWriter, r *http.Request) {
	req := &pb.HashKVRequest{}
	if !readPeerBody(w, r, req) {
		return
	}
	resp, err := c.store.HashKV(r.Context(), req.Revision)
	writePeerResponse(w, resp, err)
}

// run runs the check while this member leads: once a few election
// timeouts after start, then every interval, until ctx ends.
func (c *corruptChecker) run(ctx context.Context) {
	wait := c.first
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = c.interval
		if c.leader() != c.self {
			continue
		}
		if err := c.check(ctx); err != nil {
			c.log.Warn("corruption check", "err", err)
		}
	}
}

// check compares this member's hash at its current revision with every
// other member's.
func (c *corruptChecker) check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	mine, err := c.store.HashKV(ctx, 0)
	if err != nil {
		return fmt.Errorf("own hash: %w", err)
	}
	for _, m := range c.cluster.list() {
		if m.ID == c.self || len(m.PeerURLs) == 0 {
			continue
		}
		theirs := &pb.HashKVResponse{}
		done, err := c.peers.post(ctx, m.PeerURLs[0]+pathHashKV, mustMarshal(&pb.HashKVRequest{Revision: mine.HashRevision}), theirs)
		if !done || err != nil {
			// Down, or behind the revision: checked next time.
			continue
		}
		if theirs.CompactRevision != mine.CompactRevision || theirs.Hash == mine.Hash {
			continue
		}
		c.log.Error("member's key space differs from the leader's at the same revision: raising CORRUPT",
			"member", fmt.Sprintf("%x", m.ID), "revision", mine.HashRevision,
			"leader_hash", mine.Hash, "member_hash", theirs.Hash)
		if c.leader() != raft.None {
			_, err := c.store.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: m.ID, Alarm: pb.AlarmType_CORRUPT})
			if err != nil {
				return fmt.Errorf("raise CORRUPT alarm: %w", err)
			}
		}
	}
	return nil
}
