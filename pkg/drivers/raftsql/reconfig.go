package raftsql

import (
	"context"
	"crypto/sha1"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/membershippb"
	"go.etcd.io/etcd/client/pkg/v3/types"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/kite-db/kite/pkg/membership"
	"github.com/kite-db/kite/pkg/mvcc"
)

// Membership changes: proposing them (etcd's MemberAdd, MemberRemove,
// MemberUpdate, MemberPromote and the strict reconfiguration checks before
// them) and applying a committed one to raft, the members (memberSet,
// membership.go) and the peer transport. These are the Node's because a
// change involves all three, in the order raft requires.

// healthInterval is etcd's: a peer counts as connected for the quorum
// checks of a membership change only after this long.
const healthInterval = 5 * time.Second

// learnerReadyPercent is etcd's: a learner is promoted only once its log
// matches at least this share of the leader's.
const learnerReadyPercent = 0.9

// errRemoved stops a member that the cluster removed (etcd's words).
var errRemoved = fmt.Errorf("the member has been permanently removed from the cluster")

// applyConfChange applies one committed configuration change: validated
// against the members as of this entry, so every member takes the same
// decision; a refused change still reaches raft, as a no-op, so raft
// accepts the next one. The proposer learns the outcome.
func (n *Node) applyConfChange(cc *raftpb.ConfChange) {
	var ctx confChangeContext
	err := n.cluster.validate(cc, &ctx)
	if err != nil {
		n.log.Warn("configuration change refused", "type", cc.GetType().String(),
			"member", fmt.Sprintf("%x", cc.GetNodeId()), "err", err)
		cc.NodeId = new(uint64(raft.None))
	}
	n.confState = n.node.ApplyConfChange(cc)
	if err == nil {
		n.cluster.change(cc, ctx)
		n.changedMembers(cc, ctx)
	}
	if id := cc.GetId(); id != 0 {
		n.waits.trigger(id, mvcc.Outcome{Err: err})
	}
}

// changedMembers follows a change the members took: the peer transport
// learns of it, and a member that applies its own removal stops.
func (n *Node) changedMembers(cc *raftpb.ConfChange, ctx confChangeContext) {
	id := cc.GetNodeId()
	n.log.Info("membership changed", "change", cc.GetType().String(), "member", fmt.Sprintf("%x", id),
		"peer_urls", ctx.PeerURLs, "promote", ctx.Promote)
	if id == n.id {
		if cc.GetType() == raftpb.ConfChangeType_ConfChangeRemoveNode {
			// As etcd: wait a moment so the leader can tell the others the
			// change is committed, then stop.
			n.wg.Go(func() {
				select {
				case <-time.After(10 * n.cfg.Heartbeat):
					n.fail(errRemoved)
				case <-n.ctx.Done():
				}
			})
		}
		return
	}
	switch cc.GetType() {
	case raftpb.ConfChangeType_ConfChangeAddNode, raftpb.ConfChangeType_ConfChangeAddLearnerNode:
		if !ctx.Promote {
			n.transport.AddPeer(types.ID(id), ctx.PeerURLs)
		}
	case raftpb.ConfChangeType_ConfChangeRemoveNode:
		n.transport.RemovePeer(types.ID(id))
	case raftpb.ConfChangeType_ConfChangeUpdateNode:
		n.transport.UpdatePeer(types.ID(id), ctx.PeerURLs)
	}
}

// publish proposes this member's name and client URLs, as etcd publishes
// its attributes when it starts, until the cluster has applied them.
func (n *Node) publish() {
	req := &pb.InternalRaftRequest{ClusterMemberAttrSet: &membershippb.ClusterMemberAttrSetRequest{
		Member_ID: n.id,
		MemberAttributes: &membershippb.Attributes{
			Name: n.cfg.Name, ClientUrls: n.cfg.AdvertiseClient,
		},
	}}
	for {
		_, err := n.Propose(n.ctx, req)
		if err == nil {
			n.log.Info("published member attributes", "name", n.cfg.Name, "client_urls", n.cfg.AdvertiseClient)
			return
		}
		select {
		case <-n.ctx.Done():
			return
		case <-time.After(n.cfg.Election):
		}
	}
}

// AddMember adds a member with peerURLs, a voter or a learner, as etcd's
// MemberAdd: the new member then starts with --initial-cluster-state
// existing. It returns the new member and the members after the change.
func (n *Node) AddMember(ctx context.Context, peerURLs []string, learner bool) (*pb.Member, []*pb.Member, error) {
	if err := n.appliedCommitted(ctx); err != nil {
		return nil, nil, err
	}
	m := member{ID: newMemberID(peerURLs, time.Now()), PeerURLs: slices.Clone(peerURLs), IsLearner: learner}
	if !learner {
		if err := n.mayAddVoter(); err != nil {
			return nil, nil, err
		}
	}
	b, _ := json.Marshal(confChangeContext{member: m})
	typ := raftpb.ConfChangeType_ConfChangeAddNode
	if learner {
		typ = raftpb.ConfChangeType_ConfChangeAddLearnerNode
	}
	if err := n.configure(ctx, &raftpb.ConfChange{Type: typ.Enum(), NodeId: new(m.ID), Context: b}); err != nil {
		return nil, nil, err
	}
	return m.proto(), n.Members(), nil
}

// RemoveMember removes member id, as etcd's MemberRemove; the removed
// member stops once it learns of it.
func (n *Node) RemoveMember(ctx context.Context, id uint64) ([]*pb.Member, error) {
	if err := n.appliedCommitted(ctx); err != nil {
		return nil, err
	}
	if err := n.mayRemove(id); err != nil {
		return nil, err
	}
	cc := &raftpb.ConfChange{Type: raftpb.ConfChangeType_ConfChangeRemoveNode.Enum(), NodeId: new(id)}
	if err := n.configure(ctx, cc); err != nil {
		return nil, err
	}
	return n.Members(), nil
}

// UpdateMember changes member id's peer URLs, as etcd's MemberUpdate.
func (n *Node) UpdateMember(ctx context.Context, id uint64, peerURLs []string) ([]*pb.Member, error) {
	if err := n.appliedCommitted(ctx); err != nil {
		return nil, err
	}
	b, _ := json.Marshal(confChangeContext{member: member{ID: id, PeerURLs: slices.Clone(peerURLs)}})
	cc := &raftpb.ConfChange{Type: raftpb.ConfChangeType_ConfChangeUpdateNode.Enum(), NodeId: new(id), Context: b}
	if err := n.configure(ctx, cc); err != nil {
		return nil, err
	}
	return n.Members(), nil
}

// PromoteMember makes learner id a voter, as etcd's MemberPromote: only
// the leader knows how far the learner's log is, so a follower forwards
// the request to it.
func (n *Node) PromoteMember(ctx context.Context, id uint64) ([]*pb.Member, error) {
	if n.lead.Load() != n.id {
		return n.promoteAtLeader(ctx, id)
	}
	if err := n.appliedCommitted(ctx); err != nil {
		return nil, err
	}
	if err := n.mayPromote(id); err != nil {
		return nil, err
	}
	m, _ := n.cluster.byID(id)
	b, _ := json.Marshal(confChangeContext{member: m, Promote: true})
	cc := &raftpb.ConfChange{Type: raftpb.ConfChangeType_ConfChangeAddNode.Enum(), NodeId: new(id), Context: b}
	if err := n.configure(ctx, cc); err != nil {
		return nil, err
	}
	return n.Members(), nil
}

// appliedCommitted waits until this member has applied every entry
// committed so far (a ReadIndex round), before a membership change is
// checked against the members as applied and proposed. Without it, a
// change made through another member moments ago may not be applied here
// yet: the checks would miss it (a promote of a just-added learner is
// "member not found") and raft would drop a second change proposed while
// the first is still unapplied, so the request would only time out.
func (n *Node) appliedCommitted(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, n.requestTimeout())
	defer cancel()
	if err := n.ReadBarrier(cctx); err != nil {
		return n.proposalError(ctx, err)
	}
	return nil
}

// configure proposes a configuration change and waits until this member
// applied it, returning the change's outcome.
func (n *Node) configure(ctx context.Context, cc *raftpb.ConfChange) error {
	id := n.ids.next()
	cc.Id = new(id)
	ch := n.waits.register(id)
	defer n.waits.cancel(id)
	cctx, cancel := context.WithTimeout(ctx, n.requestTimeout())
	defer cancel()
	if err := n.node.ProposeConfChange(cctx, cc); err != nil {
		return n.proposalError(ctx, err)
	}
	select {
	case o := <-ch:
		return o.Err
	case <-cctx.Done():
		return n.proposalError(ctx, cctx.Err())
	case <-n.ctx.Done():
		return mvcc.ErrStopped
	}
}

// newMemberID is etcd's ID for an added member: sha1 of its sorted peer
// URLs and the time, so adding the same URLs again gives another ID.
func newMemberID(peerURLs []string, now time.Time) uint64 {
	urls := slices.Clone(peerURLs)
	slices.Sort(urls)
	sum := sha1.Sum([]byte(strings.Join(urls, "") + fmt.Sprintf("%d", now.Unix())))
	return binary.BigEndian.Uint64(sum[:8])
}

// The checks etcd makes before a change (its --strict-reconfig-check,
// on by default): never a change that leaves fewer started or connected
// voters than a quorum.

// connected counts the voters this member has heard from for longer than
// healthInterval, itself included.
func (n *Node) connected(vs []member) int {
	since := time.Now().Add(-healthInterval)
	c := 0
	for _, m := range vs {
		if m.ID == n.id {
			c++
			continue
		}
		if t := n.transport.ActiveSince(types.ID(m.ID)); !t.IsZero() && t.Before(since) {
			c++
		}
	}
	return c
}

func started(vs []member) int {
	c := 0
	for _, m := range vs {
		if m.Name != "" {
			c++
		}
	}
	return c
}

func (n *Node) mayAddVoter() error {
	vs := n.cluster.voters()
	if s := started(vs); !(s == 1 && len(vs) == 1) && s < (len(vs)+1)/2+1 {
		return membership.ErrMemberNotEnoughStarted
	}
	if len(vs) > 1 && n.connected(vs) < (len(vs)+1)/2+1 {
		return membership.ErrUnhealthy
	}
	return nil
}

func (n *Node) mayRemove(id uint64) error {
	m, ok := n.cluster.byID(id)
	if !ok {
		return membership.ErrMemberNotFound
	}
	if m.IsLearner {
		return nil
	}
	vs := slices.DeleteFunc(n.cluster.voters(), func(v member) bool { return v.ID == id })
	if started(vs) < len(vs)/2+1 {
		return membership.ErrMemberNotEnoughStarted
	}
	// A member that is down is not part of the active quorum.
	if id != n.id && n.transport.ActiveSince(types.ID(id)).IsZero() {
		return nil
	}
	all := n.cluster.voters()
	if n.connected(all)-1 < 1+(len(all)-1)/2 {
		return membership.ErrUnhealthy
	}
	return nil
}

func (n *Node) mayPromote(id uint64) error {
	m, ok := n.cluster.byID(id)
	if !ok {
		return membership.ErrMemberNotFound
	}
	if !m.IsLearner {
		return membership.ErrMemberNotLearner
	}
	st := n.node.Status()
	if st.Progress == nil {
		return membership.ErrNotLeader
	}
	pr, ok := st.Progress[id]
	if !ok {
		return membership.ErrMemberNotFound
	}
	if lead := st.Progress[st.ID].Match; float64(pr.Match) < float64(lead)*learnerReadyPercent {
		return membership.ErrLearnerNotReady
	}
	vs := n.cluster.voters()
	if started(vs)+1 < (len(vs)+1)/2+1 {
		return membership.ErrMemberNotEnoughStarted
	}
	return nil
}
