package raftsql

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"
)

// Packing: the write requests that queue up at a member while it hands
// its previous proposal to raft are proposed together, as one raft entry.
// A member would otherwise give raft one entry per request, and each costs
// its own hand-off to raft's goroutine, WAL record, forwarded proposal to
// the leader, append-message entry and decode on every member; one entry
// of several requests shares those costs. Packing never waits for a batch
// to fill: a request that finds the packer idle is proposed at once, alone.
// (Holding requests until this member's previous entry was applied made
// larger packs but cost more in latency than it saved: docs/benchmarks.md.)
//
// The entry's requests are applied in one transaction on every member,
// with the entry's index recorded in it (mvcc.Applier), so a crash applies
// all of them or none; each keeps its own request ID, outcome and error.

// packMagic begins an entry that holds several requests: a varint length,
// then the request, repeated. A marshaled InternalRaftRequest never begins
// with a 0 byte (it would name field 0, which protobuf forbids), and an
// empty entry is a new leader's, so the two encodings cannot be confused.
const packMagic = 0x00

const (
	// maxPackRequests bounds the requests of one entry; the proposals
	// queued beyond it go into the next one.
	maxPackRequests = 256
	// packQueue is how many proposals may wait for the packer.
	packQueue = 1024
)

// proposal is one request waiting for the packer.
type proposal struct {
	data []byte
	// errc gets the error of handing its entry to raft; nil is sent too,
	// so that Propose knows the entry left.
	errc chan error
}

// encodePack makes one entry of several marshaled requests.
func encodePack(reqs []*proposal) []byte {
	size := 1
	for _, p := range reqs {
		size += binary.MaxVarintLen64 + len(p.data)
	}
	out := make([]byte, 1, size)
	out[0] = packMagic
	for _, p := range reqs {
		out = binary.AppendUvarint(out, uint64(len(p.data)))
		out = append(out, p.data...)
	}
	return out
}

// decodeEntry returns the requests of a normal entry's data: one, or the
// several a packed entry holds.
func decodeEntry(data []byte) ([]*pb.InternalRaftRequest, error) {
	if len(data) == 0 || data[0] != packMagic {
		r := &pb.InternalRaftRequest{}
		if err := proto.Unmarshal(data, r); err != nil {
			return nil, err
		}
		return []*pb.InternalRaftRequest{r}, nil
	}
	var reqs []*pb.InternalRaftRequest
	for rest := data[1:]; len(rest) > 0; {
		n, w := binary.Uvarint(rest)
		if w <= 0 || n > uint64(len(rest)-w) {
			return nil, errors.New("packed entry: truncated request")
		}
		r := &pb.InternalRaftRequest{}
		if err := proto.Unmarshal(rest[w:w+int(n)], r); err != nil {
			return nil, fmt.Errorf("packed entry, request %d: %w", len(reqs), err)
		}
		reqs = append(reqs, r)
		rest = rest[w+int(n):]
	}
	return reqs, nil
}

// proposeQueued hands a marshaled request to the packer and waits until
// its entry was handed to raft. The caller waits for the outcome as for a
// request proposed alone.
func (n *Node) proposeQueued(ctx context.Context, data []byte) error {
	p := &proposal{data: data, errc: make(chan error, 1)}
	select {
	case n.packq <- p:
	case <-ctx.Done():
		return ctx.Err()
	case <-n.ctx.Done():
		return n.ctx.Err()
	}
	select {
	case err := <-p.errc:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-n.ctx.Done():
		return n.ctx.Err()
	}
}

// packLoop proposes the queued requests, packed, until the node stops.
func (n *Node) packLoop() {
	for {
		var first *proposal
		select {
		case first = <-n.packq:
		case <-n.ctx.Done():
			return
		}
		pack, size := []*proposal{first}, len(first.data)
	drain:
		for len(pack) < maxPackRequests && size < n.cfg.MaxRequestBytes {
			select {
			case p := <-n.packq:
				pack, size = append(pack, p), size+len(p.data)
			default:
				break drain
			}
		}
		n.proposePack(pack)
	}
}

// proposePack hands one entry to raft and tells every request of it how
// that went. A request alone is proposed as it is, readable by any tool
// that reads etcd's entries.
func (n *Node) proposePack(pack []*proposal) {
	data := pack[0].data
	if len(pack) > 1 {
		data = encodePack(pack)
	}
	ctx, cancel := context.WithTimeout(n.ctx, n.requestTimeout())
	err := n.node.Propose(ctx, data)
	cancel()
	for _, p := range pack {
		p.errc <- err
	}
}
