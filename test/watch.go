package test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// wstream is one Watch stream with a background reader.
type wstream struct {
	s       *server
	st      pb.Watch_WatchClient
	ch      chan *pb.WatchResponse
	errc    chan error
	pending []*pb.WatchResponse // read while waiting for something else
	stray   int                 // progress replies that may still arrive
}

func openWatch(t testing.TB, s *server) *wstream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st, err := s.Watch.Watch(ctx)
	if err != nil {
		t.Fatalf("%s: open watch stream: %v", s.name, err)
	}
	w := &wstream{s: s, st: st, ch: make(chan *pb.WatchResponse, 10000), errc: make(chan error, 1)}
	go func() {
		for {
			r, err := st.Recv()
			if err != nil {
				w.errc <- err
				close(w.ch)
				return
			}
			w.ch <- r
		}
	}()
	return w
}

func (w *wstream) send(r *pb.WatchRequest) error { return w.st.Send(r) }

// next returns the next response, or an error after timeout.
func (w *wstream) next(timeout time.Duration) (*pb.WatchResponse, error) {
	select {
	case r, ok := <-w.ch:
		if !ok {
			return nil, fmt.Errorf("%s: watch stream ended: %v", w.s.name, <-w.errc)
		}
		return r, nil
	case <-time.After(timeout):
		return nil, fmt.Errorf("%s: no watch response in %v", w.s.name, timeout)
	}
}

func isProgressReply(r *pb.WatchResponse) bool {
	return r.WatchId == -1 && !r.Created && !r.Canceled && len(r.Events) == 0 && r.CompactRevision == 0
}

// nextNonStray skips progress replies left over from earlier syncs.
func (w *wstream) nextNonStray(timeout time.Duration) (*pb.WatchResponse, error) {
	for {
		r, err := w.next(timeout)
		if err != nil {
			return nil, err
		}
		if w.stray > 0 && isProgressReply(r) {
			w.stray--
			continue
		}
		return r, nil
	}
}

// create sends a create request and returns its answer (the first response
// with Created set); other responses read meanwhile are kept for collect.
func (w *wstream) create(cr *pb.WatchCreateRequest) (*pb.WatchResponse, error) {
	if err := w.send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: cr}}); err != nil {
		return nil, err
	}
	for {
		r, err := w.nextNonStray(15 * time.Second)
		if err != nil {
			return nil, err
		}
		if r.Created {
			return r, nil
		}
		w.pending = append(w.pending, r)
	}
}

// cancel sends a cancel request and returns the Canceled answer for id.
func (w *wstream) cancel(id int64) (*pb.WatchResponse, error) {
	if err := w.send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CancelRequest{CancelRequest: &pb.WatchCancelRequest{WatchId: id}}}); err != nil {
		return nil, err
	}
	for {
		r, err := w.nextNonStray(15 * time.Second)
		if err != nil {
			return nil, err
		}
		if r.Canceled && r.WatchId == id && len(r.Events) == 0 {
			return r, nil
		}
		w.pending = append(w.pending, r)
	}
}

func progressRequest() *pb.WatchRequest {
	return &pb.WatchRequest{RequestUnion: &pb.WatchRequest_ProgressRequest{ProgressRequest: &pb.WatchProgressRequest{}}}
}

// collect returns every response sent before the stream's watchers are all
// synced: it asks for progress (etcd answers only once all watchers caught
// up, with watch ID -1) and reads up to the answer, which it also returns.
func (w *wstream) collect() ([]*pb.WatchResponse, *pb.WatchResponse, error) {
	if err := w.send(progressRequest()); err != nil {
		return nil, nil, err
	}
	out := w.pending
	w.pending = nil
	deadline := time.Now().Add(30 * time.Second)
	extra := 0
	for time.Now().Before(deadline) {
		r, err := w.next(time.Second)
		if err != nil {
			// Not synced yet when asked (the request is then dropped): ask again.
			if err := w.send(progressRequest()); err != nil {
				return nil, nil, err
			}
			extra++
			continue
		}
		if isProgressReply(r) {
			if w.stray > 0 {
				w.stray-- // answer to an earlier request
				continue
			}
			w.stray += extra
			return out, r, nil
		}
		out = append(out, r)
	}
	return nil, nil, fmt.Errorf("%s: no progress reply in 30s (read %d responses)", w.s.name, len(out))
}

// byWatch groups responses by watch ID, keeping their order.
func byWatch(rs []*pb.WatchResponse) map[int64][]*pb.WatchResponse {
	m := map[int64][]*pb.WatchResponse{}
	for _, r := range rs {
		m[r.WatchId] = append(m[r.WatchId], r)
	}
	return m
}

func flatten(rs []*pb.WatchResponse) []*mvccpb.Event {
	var evs []*mvccpb.Event
	for _, r := range rs {
		evs = append(evs, r.Events...)
	}
	return evs
}

// checkWatchShape checks the guarantees one watcher's responses must keep
// whatever their grouping: events ordered by (revision, sub-order), no
// revision split across responses unless the response is a fragment, and
// a header revision at least the revision of the events it carries.
func checkWatchShape(rs []*pb.WatchResponse) error {
	var lastRev int64
	prevFragment := false
	for i, r := range rs {
		if len(r.Events) == 0 {
			continue
		}
		first := r.Events[0].Kv.ModRevision
		if first < lastRev || (first == lastRev && !prevFragment) {
			return fmt.Errorf("response %d starts at revision %d after revision %d (split or out of order)", i, first, lastRev)
		}
		for j, e := range r.Events {
			if e.Kv.ModRevision < lastRev {
				return fmt.Errorf("response %d event %d: revision %d after %d", i, j, e.Kv.ModRevision, lastRev)
			}
			lastRev = e.Kv.ModRevision
		}
		if r.Header == nil || r.Header.Revision < lastRev {
			return fmt.Errorf("response %d: header %v below its events' revision %d", i, r.Header, lastRev)
		}
		prevFragment = r.Fragment
	}
	return nil
}

// compareExact compares two servers' responses, per watch ID, one by one.
func compareExact(etcd, kite []*pb.WatchResponse) string {
	e, k := byWatch(etcd), byWatch(kite)
	ids := map[int64]bool{}
	for id := range e {
		ids[id] = true
	}
	for id := range k {
		ids[id] = true
	}
	var sorted []int64
	for id := range ids {
		sorted = append(sorted, id)
	}
	slices.Sort(sorted)
	for _, id := range sorted {
		if len(e[id]) != len(k[id]) {
			return fmt.Sprintf("watch %d: etcd sent %d responses, kite %d\netcd: %s\nkite: %s", id, len(e[id]), len(k[id]), showAll(e[id]), showAll(k[id]))
		}
		for i := range e[id] {
			if d := diffResults(e[id][i], k[id][i], nil, nil); d != "" {
				return fmt.Sprintf("watch %d response %d (-etcd +kite):\n%s", id, i, d)
			}
		}
	}
	return ""
}

// compareFlat compares, per watch ID, the events in order (grouping into
// responses may differ) and checks kite's responses keep the guarantees.
func compareFlat(etcd, kite []*pb.WatchResponse) string {
	e, k := byWatch(etcd), byWatch(kite)
	for id, rs := range e {
		if err := checkWatchShape(rs); err != nil {
			return fmt.Sprintf("test bug: etcd's watch %d: %v", id, err)
		}
	}
	for id, rs := range k {
		if err := checkWatchShape(rs); err != nil {
			return fmt.Sprintf("kite watch %d: %v\n%s", id, err, showAll(rs))
		}
		if _, ok := e[id]; !ok {
			return fmt.Sprintf("kite sent responses for watch %d, etcd none: %s", id, showAll(rs))
		}
	}
	for id, rs := range e {
		ee, ke := flatten(rs), flatten(k[id])
		if len(ee) != len(ke) {
			return fmt.Sprintf("watch %d: etcd sent %d events, kite %d\netcd: %s\nkite: %s", id, len(ee), len(ke), showAll(rs), showAll(k[id]))
		}
		for i := range ee {
			if d := diffResults(ee[i], ke[i], nil, nil); d != "" {
				return fmt.Sprintf("watch %d event %d (-etcd +kite):\n%s", id, i, d)
			}
		}
		// Created/canceled/compacted answers are not events: compare those exactly.
		if d := compareExact(control(rs), control(k[id])); d != "" {
			return d
		}
	}
	return ""
}

func control(rs []*pb.WatchResponse) []*pb.WatchResponse {
	var out []*pb.WatchResponse
	for _, r := range rs {
		if r.Created || r.Canceled || r.CompactRevision != 0 {
			out = append(out, r)
		}
	}
	return out
}

func showAll(rs []*pb.WatchResponse) string {
	s := ""
	for _, r := range rs {
		s += "\n  " + show(r)
	}
	if len(s) > 6000 {
		s = s[:6000] + "...(cut)"
	}
	return s
}
