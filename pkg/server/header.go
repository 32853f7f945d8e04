package server

import (
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// raftTerm is the term kite reports in every header and in Status. A
// single-node sqlite server never holds an election, so the term stays 1
// (etcd's first term after bootstrap).
const raftTerm = 1

// header fills the cluster fields of response headers. The store sets only
// Revision; everything else is filled here, in one place, as etcd's
// v3rpc.header does.
type header struct {
	clusterID uint64
	memberID  uint64
	// raft is the replicated cluster this member belongs to (raftsql);
	// nil for a member that is a cluster of its own.
	raft Clustered
	// rev returns the current revision for responses that carry none.
	rev func() int64
}

// fill sets ClusterId, MemberId and RaftTerm, and Revision if the store left
// it 0. It returns the header (a new one if rh is nil), so callers write
// resp.Header = hdr.fill(resp.Header) and never send a nil header.
func (h *header) fill(rh *pb.ResponseHeader) *pb.ResponseHeader {
	rh = h.fillWithoutRevision(rh)
	if rh.Revision == 0 {
		rh.Revision = h.rev()
	}
	return rh
}

// fillWithoutRevision is for streams that pin their read revision
// (RangeStream): a missing revision must stay visible as 0 instead of being
// replaced by the live one.
func (h *header) fillWithoutRevision(rh *pb.ResponseHeader) *pb.ResponseHeader {
	if rh == nil {
		rh = &pb.ResponseHeader{}
	}
	rh.ClusterId = h.clusterID
	rh.MemberId = h.memberID
	rh.RaftTerm = h.term()
	return rh
}

// term is raft's current term, or the fixed term of a single member.
func (h *header) term() uint64 {
	if h.raft != nil {
		_, term, _, _ := h.raft.RaftStatus()
		return term
	}
	return raftTerm
}

// status is raft's view: leader, term, last committed and applied index.
// A single member is its own leader and its revision stands in for the
// index, as every committed write is one entry of a log.
func (h *header) status() raftStatus {
	if h.raft != nil {
		var st raftStatus
		st.Leader, st.Term, st.Index, st.Applied = h.raft.RaftStatus()
		return st
	}
	rev := uint64(h.rev())
	return raftStatus{Leader: h.memberID, Term: raftTerm, Index: rev, Applied: rev}
}

// newHeader returns a header with Revision set to rev.
func (h *header) newHeader(rev int64) *pb.ResponseHeader {
	return h.fill(&pb.ResponseHeader{Revision: rev})
}
