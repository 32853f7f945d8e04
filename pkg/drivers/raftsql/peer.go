package raftsql

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/raft/v3"
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

// peerAPI serves this member's peer URLs and asks the other members': the
// listeners Open binds (before raft starts, so a port in use fails the
// start), the HTTP server Start serves them with (raft's transport and
// /kite/...), and the client of kite's own peer requests. Its own type
// because its lifetime is not raft's: Close stops the server before raft
// stops, and the listeners close even when Start never ran.
type peerAPI struct {
	lns    []net.Listener
	srv    *http.Server
	client *http.Client
}

// serve serves h on every listener until shutdown; a listener that fails
// stops the member through fail.
func (p *peerAPI) serve(wg *sync.WaitGroup, h http.Handler, fail func(error)) {
	p.srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	for _, l := range p.lns {
		wg.Go(func() {
			if err := p.srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				fail(fmt.Errorf("serve peers on %s: %w", l.Addr(), err))
			}
		})
	}
}

// shutdown stops serving, giving requests in flight a second.
func (p *peerAPI) shutdown() {
	if p.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = p.srv.Shutdown(ctx)
}

func (p *peerAPI) closeListeners() {
	for _, l := range p.lns {
		_ = l.Close()
	}
}

func (n *Node) peerHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", n.transport.Handler())
	n.handleMembership(mux)
	mux.HandleFunc(pathHashKV, n.corrupt.serveHashKV)
	n.handleFaults(mux)
	mux.HandleFunc(pathRenew, func(w http.ResponseWriter, r *http.Request) {
		req := &pb.LeaseKeepAliveRequest{}
		if !n.readPeerRequest(w, r, req) {
			return
		}
		ttl, err := n.applier.LeaseRenew(r.Context(), req.ID)
		writePeerResponse(w, &pb.LeaseKeepAliveResponse{ID: req.ID, TTL: ttl}, err)
	})
	mux.HandleFunc(pathLeaseTTL, func(w http.ResponseWriter, r *http.Request) {
		req := &pb.LeaseTimeToLiveRequest{}
		if !n.readPeerRequest(w, r, req) {
			return
		}
		resp, err := n.applier.LeaseTimeToLive(r.Context(), req)
		writePeerResponse(w, resp, err)
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
	return readPeerBody(w, r, m)
}

// readPeerBody decodes a request another member sent.
func readPeerBody(w http.ResponseWriter, r *http.Request, m proto.Message) bool {
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

func writePeerResponse(w http.ResponseWriter, m proto.Message, err error) {
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
			if m, ok := n.cluster.byID(lead); ok && len(m.PeerURLs) > 0 {
				done, err := n.peers.post(ctx, m.PeerURLs[0]+path, body, resp)
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

// post sends a request to another member's peer URL and reports done when
// the member answered (err is then the answer).
func (p *peerAPI) post(ctx context.Context, url string, body []byte, resp proto.Message) (done bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return true, err
	}
	req.Header.Set("Content-Type", "application/protobuf")
	hr, err := p.client.Do(req)
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
