package raftsql

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// Joining a running cluster (--initial-cluster-state existing) and the
// peer endpoints membership needs: a new member asks the members of
// --initial-cluster for the cluster as it is (etcd asks their /members),
// and a follower forwards MemberPromote to the leader.
const (
	pathMembers = "/kite/members"
	pathPromote = "/kite/members/promote"
)

// remoteCluster is what pathMembers answers.
type remoteCluster struct {
	ClusterID uint64   `json:"clusterID"`
	Members   []member `json:"members"`
}

func (n *Node) handleMembership(mux *http.ServeMux) {
	mux.HandleFunc(pathMembers, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(remoteCluster{ClusterID: n.clusterID, Members: n.cluster.list()})
	})
	mux.HandleFunc(pathPromote, func(w http.ResponseWriter, r *http.Request) {
		req := &pb.MemberPromoteRequest{}
		if !n.readPeerRequest(w, r, req) {
			return
		}
		ms, err := n.PromoteMember(r.Context(), req.ID)
		writePeerResponse(w, &pb.MemberPromoteResponse{Members: ms}, err)
	})
}

// promoteAtLeader forwards MemberPromote to the leader, retrying while
// there is none or it changes, until the request timeout; the leader's
// refusal comes back as its sentinel (peererrors.go).
func (n *Node) promoteAtLeader(ctx context.Context, id uint64) ([]*pb.Member, error) {
	resp := &pb.MemberPromoteResponse{}
	if err := n.askLeader(ctx, pathPromote, &pb.MemberPromoteRequest{ID: id}, resp); err != nil {
		return nil, err
	}
	return n.Members(), nil
}

// joinCluster asks the other members of --initial-cluster for the
// cluster, finds this member in it by its peer URLs (a 'member add' put
// it there), and checks, as etcd does, that --initial-cluster names the
// cluster's members and that this member has not started before.
func (n *Node) joinCluster(ctx context.Context) (walMetadata, error) {
	cfg := n.cfg
	own := cfg.InitialCluster[cfg.Name]
	var rc remoteCluster
	var last error = errors.New("no other member in --initial-cluster")
	found := false
	for name, urls := range cfg.InitialCluster {
		if name == cfg.Name || found {
			continue
		}
		for _, u := range urls {
			if last = n.peers.getMembers(ctx, u, &rc); last == nil {
				found = true
				break
			}
		}
	}
	if !found {
		return walMetadata{}, fmt.Errorf("could not retrieve the cluster's members from the other members of --initial-cluster (--initial-cluster-state existing): %w", last)
	}
	if len(rc.Members) != len(cfg.InitialCluster) {
		return walMetadata{}, fmt.Errorf("--initial-cluster has %d members but the cluster has %d (%s): name every member, this one included",
			len(cfg.InitialCluster), len(rc.Members), describe(rc.Members))
	}
	// As etcd compares them: equal as written, or once names resolve.
	same := func(a, b []string) bool {
		ok, _ := sameResolvedURLs(ctx, n.log, a, b)
		return ok
	}
	var self *member
	for i, m := range rc.Members {
		matched := false
		for _, urls := range cfg.InitialCluster {
			if same(urls, m.PeerURLs) {
				matched = true
			}
		}
		if !matched {
			return walMetadata{}, fmt.Errorf("--initial-cluster does not name the cluster's member %x (peer URLs %s)", m.ID, strings.Join(m.PeerURLs, ","))
		}
		if same(own, m.PeerURLs) {
			self = &rc.Members[i]
		}
	}
	if self == nil {
		return walMetadata{}, fmt.Errorf("no member of the cluster has peer URLs %s: add this member with 'etcdctl member add %s --peer-urls=%s' first",
			strings.Join(own, ","), cfg.Name, strings.Join(own, ","))
	}
	if self.Name != "" {
		return walMetadata{}, fmt.Errorf("member %x has already been bootstrapped (as %q): its data dir is gone; remove it and add it again", self.ID, self.Name)
	}
	n.log.Info("joining the cluster", "member", fmt.Sprintf("%x", self.ID), "cluster", fmt.Sprintf("%x", rc.ClusterID),
		"members", describe(rc.Members))
	return walMetadata{Name: cfg.Name, MemberID: self.ID, ClusterID: rc.ClusterID, Token: cfg.Token, Members: rc.Members, Joined: true}, nil
}

func (p *peerAPI) getMembers(ctx context.Context, peerURL string, rc *remoteCluster) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, peerURL+pathMembers, nil)
	if err != nil {
		return err
	}
	hr, err := p.client.Do(req)
	if err != nil {
		return err
	}
	defer hr.Body.Close()
	if hr.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %s", peerURL, hr.Status)
	}
	if err := json.NewDecoder(hr.Body).Decode(rc); err != nil {
		return fmt.Errorf("%s: %w", peerURL, err)
	}
	return nil
}

func describe(ms []member) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = fmt.Sprintf("%x=%s", m.ID, strings.Join(m.PeerURLs, ","))
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}
