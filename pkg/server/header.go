package server

import (
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// header fills the cluster fields of response headers. The store sets only
// Revision; everything else is filled here, in one place, as etcd's
// v3rpc.header does.
type header struct {
	clusterID uint64
	memberID  uint64
	// cluster is the cluster this member belongs to (members.go).
	cluster cluster
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
	rh.RaftTerm = h.cluster.term()
	return rh
}

// status is raft's view: leader, term, last committed and applied index.
func (h *header) status() raftStatus { return h.cluster.status() }

// newHeader returns a header with Revision set to rev.
func (h *header) newHeader(rev int64) *pb.ResponseHeader {
	return h.fill(&pb.ResponseHeader{Revision: rev})
}
