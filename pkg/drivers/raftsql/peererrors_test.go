package raftsql

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/kite-db/kite/pkg/mvcc"
)

// An error a member's peer handler returns reaches the member that asked
// as the same sentinel, however it was wrapped; the asking member retries
// only when the one asked was not the leader.
func TestPeerErrorsSurviveTheTrip(t *testing.T) {
	p := &peerAPI{}
	var answer error
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writePeerResponse(w, &pb.LeaseKeepAliveResponse{}, answer)
	}))
	defer srv.Close()
	p.client = srv.Client()
	names := map[string]bool{}
	for _, pe := range peerErrors() {
		if names[pe.name] {
			t.Errorf("name %q used twice", pe.name)
		}
		names[pe.name] = true
		answer = fmt.Errorf("at the leader: %w", pe.err)
		done, err := p.post(t.Context(), srv.URL, nil, &pb.LeaseKeepAliveResponse{})
		if !errors.Is(err, pe.err) {
			t.Errorf("%v came back as %v", answer, err)
		}
		if done == retryAtLeader(pe.err) {
			t.Errorf("%v: done = %v", pe.err, done)
		}
	}
	answer = errors.New("something else")
	if done, err := p.post(t.Context(), srv.URL, nil, &pb.LeaseKeepAliveResponse{}); done || err == nil {
		t.Errorf("an unnamed error: done %v, err %v; want a retry", done, err)
	}
	// An older leader's unknown lease: 404 without a name.
	old := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "lease not found", http.StatusNotFound)
	}))
	defer old.Close()
	if done, err := p.post(t.Context(), old.URL, nil, &pb.LeaseKeepAliveResponse{}); !done || !errors.Is(err, mvcc.ErrLeaseNotFound) {
		t.Errorf("an older leader's 404: done %v, err %v; want mvcc.ErrLeaseNotFound", done, err)
	}
	answer = nil
	if done, err := p.post(t.Context(), srv.URL, nil, &pb.LeaseKeepAliveResponse{}); !done || err != nil {
		t.Errorf("an answer: done %v, err %v", done, err)
	}
}
