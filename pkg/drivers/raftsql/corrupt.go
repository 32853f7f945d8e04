package raftsql

import (
	"context"
	"fmt"
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

func (n *Node) hashKVHandler(w http.ResponseWriter, r *http.Request) {
	req := &pb.HashKVRequest{}
	if !n.readPeerBody(w, r, req) {
		return
	}
	resp, err := n.applier.HashKV(r.Context(), req.Revision)
	n.writePeerResponse(w, resp, err)
}

// corruptLoop runs the check on the leader: once a few election timeouts
// after start, then every interval.
func (n *Node) corruptLoop() {
	wait := 5 * n.cfg.Election
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = n.cfg.CorruptCheckInterval
		if n.lead.Load() != n.id {
			continue
		}
		if err := n.checkHashes(); err != nil {
			n.log.Warn("corruption check", "err", err)
		}
	}
}

// checkHashes compares this member's hash at its current revision with
// every other member's.
func (n *Node) checkHashes() error {
	ctx, cancel := context.WithTimeout(n.ctx, n.requestTimeout())
	defer cancel()
	mine, err := n.applier.HashKV(ctx, 0)
	if err != nil {
		return fmt.Errorf("own hash: %w", err)
	}
	for _, m := range n.memberList() {
		if m.ID == n.id || len(m.PeerURLs) == 0 {
			continue
		}
		theirs := &pb.HashKVResponse{}
		done, err := n.postPeer(ctx, m.PeerURLs[0]+pathHashKV, mustMarshal(&pb.HashKVRequest{Revision: mine.HashRevision}), theirs)
		if !done || err != nil {
			// Down, or behind the revision: checked next time.
			continue
		}
		if theirs.CompactRevision != mine.CompactRevision || theirs.Hash == mine.Hash {
			continue
		}
		n.log.Error("member's key space differs from the leader's at the same revision: raising CORRUPT",
			"member", fmt.Sprintf("%x", m.ID), "revision", mine.HashRevision,
			"leader_hash", mine.Hash, "member_hash", theirs.Hash)
		if n.lead.Load() != raft.None {
			_, err := n.applier.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: m.ID, Alarm: pb.AlarmType_CORRUPT})
			if err != nil {
				return fmt.Errorf("raise CORRUPT alarm: %w", err)
			}
		}
	}
	return nil
}
