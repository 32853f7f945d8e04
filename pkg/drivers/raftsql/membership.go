package raftsql

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/membershippb"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/kite-db/kite/pkg/membership"
)

// Membership. The raft log is the only source of the cluster's members, as
// in etcd: a member is added, promoted, updated or removed by a
// configuration change entry, and names and client URLs arrive in a
// "publish" entry the member proposes when it starts. Every member applies
// the same entries in the same order and so agrees on the members; a
// snapshot carries them (clusterState) for the entries it replaces. This
// file is the members as applied (memberSet); reconfig.go proposes the
// changes and applies them to raft and the transport.

// memberSet is the cluster's membership as of the applied index. It is
// its own type, with its own lock, because every part of the member reads
// it (the raft loop, the peer API, the corruption check, the gRPC layer
// through Members) while only the apply of an entry changes it.
type memberSet struct {
	// id is this member's ID; Open sets it once it is known, before any
	// goroutine reads it.
	id uint64
	// configured is this member as its flags describe it (name and peer
	// URLs), for before the log has told.
	configured member

	mu sync.RWMutex
	// members are the members in ID order and removed the IDs removed
	// from the cluster, kept so a removed member is refused if it comes
	// back; bootstrap the members this member was started or joined with.
	members   []member
	removed   map[uint64]bool
	bootstrap []member
}

func newMemberSet(cfg Config) *memberSet {
	urls := cfg.AdvertisePeer
	if len(urls) == 0 {
		urls = cfg.InitialCluster[cfg.Name]
	}
	return &memberSet{configured: member{Name: cfg.Name, PeerURLs: slices.Clone(urls)}, removed: map[uint64]bool{}}
}

// clusterState is the membership as of an applied index, as a snapshot
// records it.
type clusterState struct {
	Members []member `json:"members"`
	Removed []uint64 `json:"removed,omitempty"`
}

// confChangeContext rides in a ConfChange's Context: the member added or
// updated, and whether an AddNode promotes a learner (raft's AddNode does
// both, as etcd distinguishes them).
type confChangeContext struct {
	member
	Promote bool `json:"promote,omitempty"`
}

// maxLearners is etcd's default --max-learners.
const maxLearners = 1

// list returns the members in ID order. A member that joined and has not
// yet applied the log that defines them reports the members it was told
// of when it joined.
func (s *memberSet) list() []member {
	s.mu.RLock()
	defer s.mu.RUnlock()
	ms := s.members
	if len(ms) == 0 {
		ms = s.bootstrap
	}
	out := make([]member, len(ms))
	for i, m := range ms {
		out[i] = m.clone()
	}
	return out
}

// bootstrapped returns the members this member was started or joined
// with.
func (s *memberSet) bootstrapped() []member {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]member, len(s.bootstrap))
	for i, m := range s.bootstrap {
		out[i] = m.clone()
	}
	return out
}

func (m member) clone() member {
	m.PeerURLs = slices.Clone(m.PeerURLs)
	m.ClientURLs = slices.Clone(m.ClientURLs)
	return m
}

func (m member) proto() *pb.Member {
	return &pb.Member{ID: m.ID, Name: m.Name, PeerURLs: m.PeerURLs, ClientURLs: m.ClientURLs, IsLearner: m.IsLearner}
}

func (s *memberSet) byID(id uint64) (member, bool) {
	for _, m := range s.list() {
		if m.ID == id {
			return m, true
		}
	}
	return member{}, false
}

// self is this member as the cluster knows it, or as it was configured
// before the log told.
func (s *memberSet) self() member {
	if m, ok := s.byID(s.id); ok {
		return m
	}
	m := s.configured.clone()
	m.ID = s.id
	return m
}

// voters are the members that are not learners.
func (s *memberSet) voters() []member {
	var vs []member
	for _, m := range s.list() {
		if !m.IsLearner {
			vs = append(vs, m)
		}
	}
	return vs
}

func (s *memberSet) isRemoved(id uint64) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.removed[id]
}

// isLearner reports whether this member is a learner, as the applied log
// says (not the bootstrap).
func (s *memberSet) isLearner() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, m := range s.members {
		if m.ID == s.id {
			return m.IsLearner
		}
	}
	return false
}

// stateJSON is the membership a snapshot records.
func (s *memberSet) stateJSON() []byte {
	s.mu.RLock()
	defer s.mu.RUnlock()
	st := clusterState{Members: s.members}
	for id := range s.removed {
		st.Removed = append(st.Removed, id)
	}
	slices.Sort(st.Removed)
	b, _ := json.Marshal(st)
	return b
}

// load replaces the membership with a snapshot's.
func (s *memberSet) load(data []byte) error {
	var st clusterState
	if len(data) > 0 && data[0] == '[' {
		// Written before membership changes: the members alone.
		err := json.Unmarshal(data, &st.Members)
		if err != nil {
			return fmt.Errorf("decode the snapshot's members: %w", err)
		}
	} else if len(data) > 0 {
		if err := json.Unmarshal(data, &st); err != nil {
			return fmt.Errorf("decode the snapshot's members: %w", err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.members = st.Members
	s.removed = map[uint64]bool{}
	for _, id := range st.Removed {
		s.removed[id] = true
	}
	return nil
}

// validate checks a committed configuration change against the members as
// of its entry (etcd's rules), so every member takes the same decision,
// and decodes the member it carries into ctx.
func (s *memberSet) validate(cc *raftpb.ConfChange, ctx *confChangeContext) error {
	id := cc.GetNodeId()
	if s.isRemoved(id) {
		return membership.ErrMemberNotFound
	}
	if len(cc.Context) > 0 {
		if err := json.Unmarshal(cc.Context, ctx); err != nil {
			return fmt.Errorf("decode configuration change: %w", err)
		}
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	i := slices.IndexFunc(s.members, func(m member) bool { return m.ID == id })
	urlTaken := func() bool {
		for _, m := range s.members {
			if m.ID != id && slices.ContainsFunc(m.PeerURLs, func(u string) bool { return slices.Contains(ctx.PeerURLs, u) }) {
				return true
			}
		}
		return false
	}
	switch cc.GetType() {
	case raftpb.ConfChangeType_ConfChangeAddNode, raftpb.ConfChangeType_ConfChangeAddLearnerNode:
		if ctx.Promote {
			if i < 0 {
				return membership.ErrMemberNotFound
			}
			if !s.members[i].IsLearner {
				return membership.ErrMemberNotLearner
			}
			return nil
		}
		if i >= 0 {
			return membership.ErrMemberExists
		}
		if urlTaken() {
			return membership.ErrPeerURLExists
		}
		if cc.GetType() == raftpb.ConfChangeType_ConfChangeAddLearnerNode {
			learners := 0
			for _, m := range s.members {
				if m.IsLearner {
					learners++
				}
			}
			if learners >= maxLearners {
				return membership.ErrTooManyLearners
			}
		}
	case raftpb.ConfChangeType_ConfChangeRemoveNode:
		if i < 0 {
			return membership.ErrMemberNotFound
		}
	case raftpb.ConfChangeType_ConfChangeUpdateNode:
		if i < 0 {
			return membership.ErrMemberNotFound
		}
		if urlTaken() {
			return membership.ErrPeerURLExists
		}
	}
	return nil
}

// change applies a validated configuration change to the members.
func (s *memberSet) change(cc *raftpb.ConfChange, ctx confChangeContext) {
	id := cc.GetNodeId()
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.IndexFunc(s.members, func(m member) bool { return m.ID == id })
	switch cc.GetType() {
	case raftpb.ConfChangeType_ConfChangeAddNode, raftpb.ConfChangeType_ConfChangeAddLearnerNode:
		if ctx.Promote {
			s.members[i].IsLearner = false
			break
		}
		m := ctx.member.clone()
		m.ID, m.IsLearner = id, cc.GetType() == raftpb.ConfChangeType_ConfChangeAddLearnerNode
		s.members = append(s.members, m)
		slices.SortFunc(s.members, func(a, b member) int { return cmp.Compare(a.ID, b.ID) })
	case raftpb.ConfChangeType_ConfChangeRemoveNode:
		s.members = slices.Delete(s.members, i, i+1)
		s.removed[id] = true
	case raftpb.ConfChangeType_ConfChangeUpdateNode:
		s.members[i].PeerURLs = slices.Clone(ctx.PeerURLs)
	}
}

// setAttributes applies a member's published name and client URLs.
func (s *memberSet) setAttributes(r *membershippb.ClusterMemberAttrSetRequest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, m := range s.members {
		if m.ID == r.GetMember_ID() {
			s.members[i].Name = r.GetMemberAttributes().GetName()
			s.members[i].ClientURLs = slices.Clone(r.GetMemberAttributes().GetClientUrls())
			return
		}
	}
}

// IsIDRemoved implements rafthttp.Raft: the transport refuses a removed
// member's messages, which tells it that it was removed.
func (n *Node) IsIDRemoved(id uint64) bool { return n.cluster.isRemoved(id) }

// IsLearner reports whether this member is a learner.
func (n *Node) IsLearner() bool { return n.cluster.isLearner() }

// Members returns the cluster's members in ID order, as MemberList
// reports them. A member added but not started has no name and no client
// URLs, as in etcd.
func (n *Node) Members() []*pb.Member {
	ms := n.cluster.list()
	out := make([]*pb.Member, len(ms))
	for i, m := range ms {
		out[i] = m.proto()
	}
	return out
}
