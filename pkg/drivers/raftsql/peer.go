package raftsql

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/kite-db/kite/pkg/membership"
	"github.com/kite-db/kite/pkg/mvcc"
)

// The peer URLs serve etcd's raft transport and, under /kite/, what a
// member asks of another: the members (join.go) and, of the leader, lease
// renewals and TimeToLive, which only the leader's clocks can answer (etcd
// forwards them to its leader the same way). An answer that is an error
// carries its sentinel's name (peererrors.go).
const (
	pathRenew    = "/kite/lease/renew"
	pathLeaseTTL = "/kite/lease/ttl"
)

// The rafthttp.Raft side of the Node.

func (n *Node) Process(ctx context.Context, m *raftpb.Message) error {
	return n.node.Step(ctx, m)
}
func (n *Node) ReportUnreachable(id uint64) { n.node.ReportUnreachable(id) }
func (n *Node) ReportSnapshot(id uint64, status raft.SnapshotStatus) {
	n.node.ReportSnapshot(id, status)
}

func (n *Node) peerHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", n.transport.Handler())
	n.handleMembership(mux)
	mux.HandleFunc(pathHashKV, n.hashKVHandler)
	n.handleFaults(mux)
	mux.HandleFunc(pathRenew, func(w http.ResponseWriter, r *http.Request) {
		req := &pb.LeaseKeepAliveRequest{}
		if !n.readPeerRequest(w, r, req) {
			return
		}
		ttl, err := n.applier.LeaseRenew(r.Context(), req.ID)
		n.writePeerResponse(w, &pb.LeaseKeepAliveResponse{ID: req.ID, TTL: ttl}, err)
	})
	mux.HandleFunc(pathLeaseTTL, func(w http.ResponseWriter, r *http.Request) {
		req := &pb.LeaseTimeToLiveRequest{}
		if !n.readPeerRequest(w, r, req) {
			return
		}
		resp, err := n.applier.LeaseTimeToLive(r.Context(), req)
		n.writePeerResponse(w, resp, err)
	})
	return mux
}

// readPeerRequest decodes a forwarded request; a member that is no longer
// leader refuses it, so the follower asks the new one.
func (n *Node) readPeerRequest(w http.ResponseWriter, r *http.Request, m proto.Message) bool {
	if n.lead.Load() != n.id {
		writePeerError(w, membership.ErrNotLeader)
		return false
	}
	return n.readPeerBody(w, r, m)
}

// readPeerBody decodes a request another member sent.
func (n *Node) readPeerBody(w http.ResponseWriter, r *http.Request, m proto.Message) bool {
	b, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err == nil {
		err = proto.Unmarshal(b, m)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

func (n *Node) writePeerResponse(w http.ResponseWriter, m proto.Message, err error) {
	if err != nil {
		writePeerError(w, err)
		return
	}
	b, err := proto.Marshal(m)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/protobuf")
	_, _ = w.Write(b)
}

// LeaseRenewAtLeader implements mvcc.Replicator.
func (n *Node) LeaseRenewAtLeader(ctx context.Context, id int64) (int64, error) {
	resp := &pb.LeaseKeepAliveResponse{}
	if err := n.askLeader(ctx, pathRenew, &pb.LeaseKeepAliveRequest{ID: id}, resp); err != nil {
		return 0, err
	}
	return resp.TTL, nil
}

// LeaseTimeToLiveAtLeader implements mvcc.Replicator.
func (n *Node) LeaseTimeToLiveAtLeader(ctx context.Context, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	resp := &pb.LeaseTimeToLiveResponse{}
	if err := n.askLeader(ctx, pathLeaseTTL, r, resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// askLeader sends a request to the leader's peer URL, retrying while there
// is no leader or the leader changes, until the request timeout.
func (n *Node) askLeader(ctx context.Context, path string, req, resp proto.Message) error {
	body, err := proto.Marshal(req)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, n.requestTimeout())
	defer cancel()
	var last error = mvcc.ErrNoLeader
	for {
		if lead := n.lead.Load(); lead != raft.None && lead != n.id {
			if m, ok := n.memberByID(lead); ok && len(m.PeerURLs) > 0 {
				done, err := n.postPeer(ctx, m.PeerURLs[0]+path, body, resp)
				if done {
					return err
				}
				last = err
			}
		}
		select {
		case <-ctx.Done():
			if errors.Is(last, mvcc.ErrNoLeader) {
				return last
			}
			return fmt.Errorf("%w: %v", mvcc.ErrUnavailable, last)
		case <-n.ctx.Done():
			return mvcc.ErrStopped
		case <-time.After(n.cfg.Heartbeat):
		}
	}
}

// postPeer reports done when the leader answered (err is then the answer).
func (n *Node) postPeer(ctx context.Context, url string, body []byte, resp proto.Message) (done bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return true, err
	}
	req.Header.Set("Content-Type", "application/protobuf")
	hr, err := n.peerClient.Do(req)
	if err != nil {
		return false, err
	}
	defer hr.Body.Close()
	b, err := io.ReadAll(io.LimitReader(hr.Body, 1<<20))
	if err != nil {
		return false, err
	}
	if hr.StatusCode == http.StatusOK {
		return true, proto.Unmarshal(b, resp)
	}
	if err := peerErrorOf(hr.Header.Get(headerPeerError)); err != nil {
		return !retryAtLeader(err), err
	}
	if hr.StatusCode == http.StatusNotFound && hr.Header.Get(headerPeerError) == "" {
		// A leader of an older kite, from before errors travelled by
		// name, answers an unknown lease so (in a rolling upgrade).
		return true, mvcc.ErrLeaseNotFound
	}
	return false, fmt.Errorf("%s answered %s: %s", url, hr.Status, bytes.TrimSpace(b))
}

func mustMarshal(m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err) // only kite's own well-formed requests are marshalled
	}
	return b
}
