package test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// End-to-end tests of raftsql mode: three kite processes replicating
// through raft, started with etcd's clustering flags (cluster_test.go).

// showGet describes a get's outcome for an error message.
func showGet(resp *clientv3.GetResponse, err error) string {
	if err != nil {
		return "error " + err.Error()
	}
	var kvs []string
	for _, kv := range resp.Kvs {
		kvs = append(kvs, fmt.Sprintf("%s=%q@%d", kv.Key, kv.Value, kv.ModRevision))
	}
	return fmt.Sprintf("revision %d, kvs %v", resp.Header.Revision, kvs)
}

// sameHashKV checks that HashKV at rev agrees on every member.
func sameHashKV(t *testing.T, ctx context.Context, c *cluster, rev int64) {
	t.Helper()
	var first *pb.HashKVResponse
	var lines []string
	differ := false
	for _, m := range c.live() {
		h, err := m.Maint.HashKV(ctx, &pb.HashKVRequest{Revision: rev})
		if err != nil {
			t.Fatalf("HashKV at revision %d on %s: %v", rev, m.name, err)
		}
		lines = append(lines, fmt.Sprintf("%s: hash %d compact_revision %d hash_revision %d", m.name, h.Hash, h.CompactRevision, h.HashRevision))
		if first == nil {
			first = h
		} else if h.Hash != first.Hash || h.CompactRevision != first.CompactRevision {
			differ = true
		}
	}
	if differ {
		t.Errorf("HashKV at revision %d differs between members:\n%s", rev, strings.Join(lines, "\n"))
	}
}

// TestRaftSQLReplication: a put through any member is seen at once by a
// linearizable get through every other member, and by a serializable get
// soon; revisions, the leader, the raft term and the member list agree on
// every member.
func TestRaftSQLReplication(t *testing.T) {
	c := startCluster(t, 3)
	ctx := testCtx(t, time.Minute)
	for i, m := range c.members {
		key, val := fmt.Sprintf("/repl/%d", i), "from-"+m.name
		put, err := m.Client.Put(ctx, key, val)
		if err != nil {
			t.Fatalf("put through %s: %v", m.name, err)
		}
		rev := put.Header.Revision
		sees := func(r *clientv3.GetResponse) bool {
			return len(r.Kvs) == 1 && string(r.Kvs[0].Value) == val && r.Kvs[0].ModRevision == rev
		}
		for _, j := range c.others(i) {
			o := c.members[j]
			g, err := o.Client.Get(ctx, key)
			if err != nil || !sees(g) || g.Header.Revision < rev {
				t.Errorf("linearizable get of %s through %s right after its put through %s at revision %d: %s",
					key, o.name, m.name, rev, showGet(g, err))
			}
			deadline := time.Now().Add(5 * time.Second)
			for {
				g, err := o.Client.Get(ctx, key, clientv3.WithSerializable())
				if err == nil && sees(g) {
					break
				}
				if time.Now().After(deadline) {
					t.Errorf("serializable get of %s through %s 5 s after its put through %s at revision %d: %s",
						key, o.name, m.name, rev, showGet(g, err))
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}

	// With no write in between, every member answers the same range at
	// the same revision.
	var first *clientv3.GetResponse
	for _, m := range c.members {
		g, err := m.Client.Get(ctx, "/repl/", clientv3.WithPrefix())
		if err != nil {
			t.Fatalf("get through %s: %v", m.name, err)
		}
		if first == nil {
			first = g
			continue
		}
		if g.Header.Revision != first.Header.Revision || showGet(g, nil) != showGet(first, nil) {
			t.Errorf("%s answers %s; %s answered %s", m.name, showGet(g, nil), c.members[0].name, showGet(first, nil))
		}
	}
	if len(first.Kvs) != len(c.members) {
		t.Errorf("range /repl/ = %s; want %d keys", showGet(first, nil), len(c.members))
	}

	// Status: one leader, one term, one cluster, distinct member IDs.
	ids := map[string]uint64{}
	var sts []*pb.StatusResponse
	for _, m := range c.members {
		st, err := m.status()
		if err != nil {
			t.Fatalf("Status of %s: %v", m.name, err)
		}
		sts = append(sts, st)
		ids[m.name] = st.Header.GetMemberId()
		t.Logf("%s: member %x leader %x term %d index %d applied %d cluster %x revision %d version %s",
			m.name, st.Header.GetMemberId(), st.Leader, st.RaftTerm, st.RaftIndex, st.RaftAppliedIndex,
			st.Header.GetClusterId(), st.Header.GetRevision(), st.Version)
	}
	leaders := 0
	for i, st := range sts {
		if st.Leader == 0 || st.Leader != sts[0].Leader {
			t.Errorf("%s reports leader %x, %s %x", c.members[i].name, st.Leader, c.members[0].name, sts[0].Leader)
		}
		if st.RaftTerm == 0 || st.RaftTerm != sts[0].RaftTerm {
			t.Errorf("%s reports raft term %d, %s %d", c.members[i].name, st.RaftTerm, c.members[0].name, sts[0].RaftTerm)
		}
		if st.Header.GetClusterId() == 0 || st.Header.GetClusterId() != sts[0].Header.GetClusterId() {
			t.Errorf("%s reports cluster ID %x, %s %x", c.members[i].name, st.Header.GetClusterId(), c.members[0].name, sts[0].Header.GetClusterId())
		}
		if st.Header.GetMemberId() == st.Leader {
			leaders++
		}
		for j := range i {
			if st.Header.GetMemberId() == sts[j].Header.GetMemberId() {
				t.Errorf("%s and %s have the same member ID %x", c.members[i].name, c.members[j].name, st.Header.GetMemberId())
			}
		}
	}
	if leaders != 1 {
		t.Errorf("%d members are the leader they report; want 1", leaders)
	}

	// The member list, through each member's Cluster API.
	for _, m := range c.members {
		ml, err := m.Cluster.MemberList(ctx, &pb.MemberListRequest{Linearizable: true})
		if err != nil {
			t.Fatalf("MemberList through %s: %v", m.name, err)
		}
		checkMemberList(t, c, ids, ml.Members, "MemberList through "+m.name)
	}
}

// checkMemberList checks a member list against the cluster: each member
// once, with its name, ID, peer URL and client URL.
func checkMemberList(t *testing.T, c *cluster, ids map[string]uint64, got []*pb.Member, what string) {
	t.Helper()
	if len(got) != len(c.members) {
		t.Errorf("%s: %d members %v; want %d", what, len(got), got, len(c.members))
		return
	}
	for _, m := range c.members {
		i := slices.IndexFunc(got, func(g *pb.Member) bool { return g.Name == m.name })
		if i < 0 {
			t.Errorf("%s: no member named %s in %v", what, m.name, got)
			continue
		}
		g := got[i]
		if !slices.Equal(g.PeerURLs, []string{m.peerURL}) || !slices.Equal(g.ClientURLs, []string{m.Endpoint}) ||
			(ids != nil && g.ID != ids[m.name]) || g.IsLearner {
			t.Errorf("%s: member %s is %v; want ID %x, peer URL %s, client URL %s, not a learner",
				what, m.name, g, ids[m.name], m.peerURL, m.Endpoint)
		}
	}
}

// TestRaftSQLWatchOnEveryNode: writers on every member, a watcher on every
// member: all watchers see one gapless order holding every acknowledged
// write.
func TestRaftSQLWatchOnEveryNode(t *testing.T) {
	c := startCluster(t, 3)
	ctx := testCtx(t, time.Minute)
	const prefix = "/every/"
	ks := c.procs()
	ws := watchEvery(ctx, t, ks, prefix)
	wr := startWriters(ctx, t, ks, putDeleteWriter(prefix))
	time.Sleep(3 * time.Second)
	acks, failed := wr.stop()
	t.Logf("acknowledged writes: %d; failed writes per member: %v", len(acks), failed)
	for i, f := range failed {
		if f != 0 {
			t.Errorf("%d writes through %s failed in a healthy cluster", f, c.members[i].name)
		}
	}
	if len(acks) < 100 {
		t.Errorf("only %d writes acknowledged in 3 s", len(acks))
	}
	end, err := c.members[1].Client.Put(ctx, prefix+"end", "end")
	if err != nil {
		t.Fatalf("final put: %v", err)
	}
	last := end.Header.Revision
	ws.waitFor(t, ks, last)
	checkOneOrder(t, ws.stop(), last, acks)
	sameHashKV(t, ctx, c, last)
}

// TestRaftSQLLeaderKill: the leader is SIGKILLed while writers run on
// every member; the survivors elect a new leader and take writes again;
// the killed member, restarted, catches up. The survivors' watchers see
// one gapless order with every acknowledged write, and a watch from
// revision 1 on the restarted member sees the same.
func TestRaftSQLLeaderKill(t *testing.T) {
	c := startCluster(t, 3)
	ctx := testCtx(t, 2*time.Minute)
	const prefix = "/leaderkill/"
	leader := c.leaderIndex(t)
	killed := c.members[leader]
	survivors := c.others(leader)
	ws := watchEvery(ctx, t, c.procs(survivors...), prefix)
	wr := startWriters(ctx, t, c.procs(), putDeleteWriter(prefix))
	time.Sleep(1500 * time.Millisecond)

	killedAt := time.Now()
	killed.Kill()
	newLeader := c.leaderIndex(t)
	elected := time.Since(killedAt)
	for _, i := range survivors {
		putEventually(t, c.members[i], prefix+"after-election", c.members[i].name, 10*time.Second)
	}
	t.Logf("leader %s killed: %s elected after %v; writes through both survivors succeed after %v",
		killed.name, c.members[newLeader].name, elected, time.Since(killedAt))
	time.Sleep(time.Second)

	killed.Restart()
	t.Logf("%s restarted and serving %v after it was killed", killed.name, time.Since(killedAt))
	time.Sleep(1500 * time.Millisecond)
	acks, failed := wr.stop()
	t.Logf("acknowledged writes: %d; failed writes per member: %v", len(acks), failed)
	if failed[leader] == 0 {
		t.Errorf("no write through the killed leader failed: it was not killed while writers ran")
	}
	if len(acks) < 100 {
		t.Errorf("only %d writes acknowledged", len(acks))
	}

	end, err := c.members[survivors[0]].Client.Put(ctx, prefix+"end", "end")
	if err != nil {
		t.Fatalf("final put: %v", err)
	}
	last := end.Header.Revision
	ws.waitFor(t, c.procs(survivors...), last)
	events := ws.stop()
	rw := watchEvery(ctx, t, c.procs(leader), prefix)
	rw.waitFor(t, c.procs(leader), last)
	events = append(events, rw.stop()...)
	checkOneOrder(t, events, last, acks)

	// The restarted member serves reads of everything acknowledged.
	g, err := killed.Client.Get(ctx, prefix+"end")
	if err != nil || len(g.Kvs) != 1 || g.Kvs[0].ModRevision != last {
		t.Errorf("linearizable get through the restarted %s: %s; want the final put at revision %d", killed.name, showGet(g, err), last)
	}
	g, err = killed.Client.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithSerializable())
	if err != nil {
		t.Fatalf("serializable get through the restarted %s: %v", killed.name, err)
	}
	latest := map[string]ack{} // each key's last acknowledged write
	for _, a := range acks {
		if a.rev > latest[a.key].rev {
			latest[a.key] = a
		}
	}
	for key, a := range latest {
		i := slices.IndexFunc(g.Kvs, func(kv *mvccpb.KeyValue) bool { return string(kv.Key) == key })
		switch {
		case a.value == "" && i >= 0 && g.Kvs[i].ModRevision <= a.rev:
			t.Errorf("restarted %s still has %s (mod revision %d), deleted at revision %d", killed.name, key, g.Kvs[i].ModRevision, a.rev)
		case a.value != "" && i < 0:
			t.Errorf("restarted %s lacks %s, written %q at revision %d", killed.name, key, a.value, a.rev)
		case a.value != "" && g.Kvs[i].ModRevision < a.rev:
			t.Errorf("restarted %s has %s=%q at mod revision %d, older than the acknowledged %q at %d",
				killed.name, key, g.Kvs[i].Value, g.Kvs[i].ModRevision, a.value, a.rev)
		}
	}
	sameHashKV(t, ctx, c, last)
}

// TestRaftSQLFollowerRestart: a follower killed while writes go on,
// restarted from its WAL, catches up: it serves the last write and HashKV
// agrees on every member.
func TestRaftSQLFollowerRestart(t *testing.T) {
	c := startCluster(t, 3)
	ctx := testCtx(t, time.Minute)
	leader := c.leaderIndex(t)
	f := (leader + 1) % 3
	fm := c.members[f]
	const prefix = "/follower/"
	for n := range 100 {
		m := c.members[n%3]
		if _, err := m.Client.Put(ctx, fmt.Sprintf("%sk%02d", prefix, n%40), fmt.Sprintf("before-%d", n)); err != nil {
			t.Fatalf("put %d through %s: %v", n, m.name, err)
		}
	}
	fm.Kill()
	live := c.others(f)
	for n := range 300 {
		m := c.members[live[n%2]]
		key := fmt.Sprintf("%sk%02d", prefix, n%40)
		var err error
		if n%15 == 14 {
			_, err = m.Client.Delete(ctx, key)
		} else {
			_, err = m.Client.Put(ctx, key, fmt.Sprintf("during-%d", n))
		}
		if err != nil {
			t.Fatalf("write %d through %s while follower %s is down: %v", n, m.name, fm.name, err)
		}
	}
	restartAt := time.Now()
	fm.Restart()
	t.Logf("follower %s restarted and serving after %v", fm.name, time.Since(restartAt))
	end, err := c.members[leader].Client.Put(ctx, prefix+"end", "end")
	if err != nil {
		t.Fatalf("final put: %v", err)
	}
	last := end.Header.Revision
	// Serializable reads: each member answers from what it has applied,
	// which may lag behind the leader's (the restarted one's most).
	for _, m := range c.members {
		deadline := time.Now().Add(15 * time.Second)
		for {
			g, err := m.Client.Get(ctx, prefix+"end", clientv3.WithSerializable())
			if err == nil && len(g.Kvs) == 1 && g.Kvs[0].ModRevision == last {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s has not applied revision %d in 15 s: %s", m.name, last, showGet(g, err))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	t.Logf("every member, restarted follower %s included, applied revision %d %v after its restart", fm.name, last, time.Since(restartAt))
	var want string
	for i, m := range c.members {
		g, err := m.Client.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(last), clientv3.WithSerializable())
		if err != nil {
			t.Fatalf("get at revision %d through %s: %v", last, m.name, err)
		}
		got := showGet(&clientv3.GetResponse{Header: &pb.ResponseHeader{}, Kvs: g.Kvs}, nil)
		if i == 0 {
			want = got
		} else if got != want {
			t.Errorf("range at revision %d through %s:\n%s\nthrough %s:\n%s", last, m.name, got, c.members[0].name, want)
		}
	}
	sameHashKV(t, ctx, c, last)
}

// keepAlive sends KeepAliveOnce for a lease through one member at an
// interval until stopped, and records the outcomes.
type keepAlive struct {
	stopc   chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	ok      int
	failed  int
	lastOK  time.Time
	lastErr error
}

func startKeepAlive(m *clusterMember, id clientv3.LeaseID, every time.Duration) *keepAlive {
	ka := &keepAlive{stopc: make(chan struct{}), done: make(chan struct{})}
	// A client of its own: the member's may be closed by a Kill meanwhile.
	go func() {
		defer close(ka.done)
		c, err := newClient(m.Endpoint)
		if err != nil {
			ka.mu.Lock()
			ka.lastErr = err
			ka.mu.Unlock()
			return
		}
		defer c.Close()
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err := c.KeepAliveOnce(ctx, id)
			cancel()
			ka.mu.Lock()
			if err == nil {
				ka.ok++
				ka.lastOK = time.Now()
			} else {
				ka.failed++
				ka.lastErr = err
			}
			ka.mu.Unlock()
			select {
			case <-ka.stopc:
				return
			case <-time.After(every):
			}
		}
	}()
	return ka
}

// stop ends the keep-alives and returns when the last one succeeded.
func (ka *keepAlive) stop() time.Time {
	close(ka.stopc)
	<-ka.done
	return ka.lastOK
}

func (ka *keepAlive) counts() (ok, failed int, lastErr error) {
	ka.mu.Lock()
	defer ka.mu.Unlock()
	return ka.ok, ka.failed, ka.lastErr
}

// TestRaftSQLLeases: a lease granted through one follower and kept alive
// through the other outlives its TTL, and every member agrees on it;
// without keep-alives it expires and its key is deleted on every member.
// A lease kept alive through a follower survives the leader's death: the
// new leader gives it a full TTL, even after a time without quorum longer
// than the TTL.
func TestRaftSQLLeases(t *testing.T) {
	c := startCluster(t, 3)
	ctx := testCtx(t, 90*time.Second)
	leader := c.leaderIndex(t)
	f1, f2 := c.members[(leader+1)%3], c.members[(leader+2)%3]
	const ttl = 3
	g, err := f1.Client.Grant(ctx, ttl)
	if err != nil {
		t.Fatalf("grant through follower %s: %v", f1.name, err)
	}
	if _, err := f1.Client.Put(ctx, "/lease/a", "v", clientv3.WithLease(g.ID)); err != nil {
		t.Fatalf("put with the lease through %s: %v", f1.name, err)
	}
	ka := startKeepAlive(f2, g.ID, 500*time.Millisecond)
	time.Sleep((2*ttl + 1) * time.Second)
	for _, m := range c.members {
		r, err := m.Client.TimeToLive(ctx, g.ID, clientv3.WithAttachedKeys())
		if err != nil || r.TTL <= 0 || r.GrantedTTL != ttl || len(r.Keys) != 1 || string(r.Keys[0]) != "/lease/a" {
			t.Errorf("TimeToLive through %s of a %d s lease kept alive through %s for %d s: %+v, %v; want it alive with key /lease/a",
				m.name, ttl, f2.name, 2*ttl+1, r, err)
		}
		if gr, err := m.Client.Get(ctx, "/lease/a"); err != nil || len(gr.Kvs) != 1 {
			t.Errorf("key of the kept-alive lease through %s: %s; want it present", m.name, showGet(gr, err))
		}
	}
	ok, failed, lastErr := ka.counts()
	lastKA := ka.stop()
	if failed != 0 {
		t.Errorf("keep-alives through %s: %d succeeded, %d failed (last: %v)", f2.name, ok, failed, lastErr)
	}

	// Expiry: the key goes on every member within TTL + a few seconds of
	// the last keep-alive.
	const grace = 4 * time.Second
	deadline := lastKA.Add(ttl*time.Second + grace)
	for _, m := range c.members {
		for {
			gr, gerr := m.Client.Get(ctx, "/lease/a")
			r, terr := m.Client.TimeToLive(ctx, g.ID)
			if gerr == nil && len(gr.Kvs) == 0 && terr == nil && r.TTL == -1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%v after the last keep-alive of a %d s lease, through %s: key %s, TimeToLive TTL %d (%v); want the key gone and TTL -1",
					time.Since(lastKA), ttl, m.name, showGet(gr, gerr), ttlOf(r), terr)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	t.Logf("%d s lease expired on every member %v after its last keep-alive", ttl, time.Since(lastKA))

	// Failover: keep-alives through a follower go on while the leader dies.
	const ttl2 = 3
	g2, err := f1.Client.Grant(ctx, ttl2)
	if err != nil {
		t.Fatalf("grant through follower %s: %v", f1.name, err)
	}
	if _, err := f2.Client.Put(ctx, "/lease/b", "v", clientv3.WithLease(g2.ID)); err != nil {
		t.Fatalf("put with the lease through %s: %v", f2.name, err)
	}
	ka = startKeepAlive(f2, g2.ID, 500*time.Millisecond)
	time.Sleep(time.Second)
	killedAt := time.Now()
	c.members[leader].Kill()
	nl := c.members[c.leaderIndex(t)]
	r, err := nl.Client.TimeToLive(ctx, g2.ID)
	t.Logf("new leader %s elected %v after the kill; it gives the %d s lease TTL %d (%v)", nl.name, time.Since(killedAt), ttl2, ttlOf(r), err)
	if err != nil || r.TTL < ttl2-1 {
		t.Errorf("TimeToLive through the new leader %s right after the election: TTL %d, %v; want the full TTL %d (at least %d)", nl.name, ttlOf(r), err, ttl2, ttl2-1)
	}
	time.Sleep(2 * ttl2 * time.Second)
	ok, failed, lastErr = ka.counts()
	lastKA = ka.stop()
	t.Logf("keep-alives through %s across the failover: %d succeeded, %d failed (last error: %v); last success %v ago",
		f2.name, ok, failed, lastErr, time.Since(lastKA))
	if time.Since(lastKA) > 2*time.Second {
		t.Errorf("no keep-alive through %s succeeded in the last %v", f2.name, time.Since(lastKA))
	}
	for _, i := range c.others(leader) {
		m := c.members[i]
		r, err := m.Client.TimeToLive(ctx, g2.ID, clientv3.WithAttachedKeys())
		if err != nil || r.TTL <= 0 || len(r.Keys) != 1 {
			t.Errorf("TimeToLive through %s of the lease kept alive across the failover: %+v, %v; want it alive with its key", m.name, r, err)
		}
		if gr, err := m.Client.Get(ctx, "/lease/b"); err != nil || len(gr.Kvs) != 1 {
			t.Errorf("key of the lease kept alive across the failover, through %s: %s; want it present", m.name, showGet(gr, err))
		}
	}

	// No quorum, so no leader and no keep-alive, for twice the TTL: the
	// next leader gives the lease a full TTL again rather than expiring it.
	up := c.others(leader)
	down := c.members[up[0]]
	down.Kill()
	time.Sleep(2 * ttl2 * time.Second)
	down.Restart()
	nl = c.members[c.leaderIndex(t)]
	r, err = nl.Client.TimeToLive(ctx, g2.ID, clientv3.WithAttachedKeys())
	t.Logf("after %d s without a leader, the new leader %s gives the %d s lease TTL %d (%v)", 2*ttl2, nl.name, ttl2, ttlOf(r), err)
	if err != nil || r.TTL < ttl2-1 || len(r.Keys) != 1 {
		t.Errorf("TimeToLive through the leader %s elected after %d s without quorum: %+v, %v; want the lease alive with its key and a full TTL %d (at least %d)",
			nl.name, 2*ttl2, r, err, ttl2, ttl2-1)
	}
	for _, i := range up {
		m := c.members[i]
		if gr, err := m.Client.Get(ctx, "/lease/b"); err != nil || len(gr.Kvs) != 1 {
			t.Errorf("key of the lease after the quorum came back, through %s: %s; want it present", m.name, showGet(gr, err))
		}
	}
}

// TestRaftSQLBootstrapRefused: a member refuses to start, and writes
// nothing, when its name is not in --initial-cluster; a data dir
// bootstrapped by one cluster refuses another cluster token.
func TestRaftSQLBootstrapRefused(t *testing.T) {
	t.Run("NameNotInInitialCluster", func(t *testing.T) {
		dir := t.TempDir()
		var peers []string
		for i := range 3 {
			peers = append(peers, fmt.Sprintf("n%d=http://127.0.0.1:%d", i, freePort(t)))
		}
		client := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
		peer := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
		args := memberArgs("stranger", dir, client, peer, strings.Join(peers, ","), "tok")
		out, code := runToExit(t, args, 20*time.Second)
		t.Logf("exit code %d; output:\n%s", code, out)
		if code == 0 || !strings.Contains(out, "couldn't find local name") {
			t.Errorf("member named stranger, not in --initial-cluster: exit code %d; want non-zero and \"couldn't find local name\" in:\n%s", code, out)
		}
		if _, err := os.Stat(filepath.Join(dir, "member", "wal")); !os.IsNotExist(err) {
			t.Errorf("the refused member created %s (stat: %v)", filepath.Join(dir, "member", "wal"), err)
		}
	})
	t.Run("ClusterTokenChanged", func(t *testing.T) {
		if againstEtcd {
			t.Skip("etcd ignores --initial-cluster-token on a data dir it has bootstrapped")
		}
		c := startCluster(t, 3)
		if _, err := c.members[0].Client.Put(testCtx(t, 10*time.Second), "k", "v"); err != nil {
			t.Fatal(err)
		}
		for _, m := range c.members {
			m.Stop()
		}
		m := c.members[0]
		out, code := runToExit(t, m.args(c.token+"-other"), 20*time.Second)
		t.Logf("exit code %d; output:\n%s", code, out)
		lower := strings.ToLower(out)
		if code == 0 || !strings.Contains(lower, "cluster") || !strings.Contains(lower, "token") {
			t.Errorf("%s restarted on its data dir with another --initial-cluster-token: exit code %d; want non-zero and a message about the cluster token in:\n%s",
				m.name, code, out)
		}
	})
}

// TestRaftSQLLinearizable: clients spread over the three members send
// gets, puts and compare-and-swaps on a few keys while the leader is
// killed and restarted; the history must be linearizable (porcupine, with
// linearizability_test.go's register model). Also with the requests that
// queue up at a member proposed as one entry (--raft-pack-proposals).
func TestRaftSQLLinearizable(t *testing.T) {
	t.Run("one entry per request", func(t *testing.T) { testRaftSQLLinearizable(t) })
	t.Run("packed proposals", func(t *testing.T) { testRaftSQLLinearizable(t, "--raft-pack-proposals") })
}

func testRaftSQLLinearizable(t *testing.T, flags ...string) {
	c := startClusterWith(t, 3, flags...)
	ctx := testCtx(t, 2*time.Minute)
	// Clients run until stopped, at most maxOps each (porcupine's work
	// grows with the history).
	const clients, maxOps = 6, 1000
	stop := make(chan struct{})
	keys := []string{"/lin/a", "/lin/b", "/lin/c"}
	h := newRegHistory()
	var done atomic.Int64 // operations completed, by every client
	var wg sync.WaitGroup
	for id := range clients {
		wg.Go(func() {
			cl, err := newClient(c.members[id%len(c.members)].Endpoint)
			if err != nil {
				t.Errorf("client %d: %v", id, err)
				return
			}
			defer cl.Close()
			rc := h.client(id, cl, 11)
			for n := range maxOps {
				select {
				case <-stop:
					return
				default:
				}
				rc.step(ctx, keys, n)
				done.Add(1)
				// Paced, so that the run spans the failover.
				time.Sleep(time.Duration(rc.rng.IntN(10)) * time.Millisecond)
			}
		})
	}
	// The leader dies mid-run, and comes back.
	time.Sleep(1500 * time.Millisecond)
	leader := c.leaderIndex(t)
	c.members[leader].Kill()
	t.Logf("leader %s killed after %d operations", c.members[leader].name, done.Load())
	time.Sleep(2 * time.Second)
	c.members[leader].Restart()
	t.Logf("%s restarted after %d operations", c.members[leader].name, done.Load())
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()
	history := h.ops
	if n := done.Load(); n < 100 {
		t.Errorf("only %d operations done", n)
	}
	unknown := 0
	for _, op := range history {
		if op.Output.(regOutput).unknown {
			unknown++
		}
	}
	res, info := porcupine.CheckOperationsVerbose(registerModel, history, 30*time.Second)
	switch res {
	case porcupine.Ok:
		t.Logf("%d operations (%d with unknown outcome) over 3 members, leader killed: linearizable", len(history), unknown)
	case porcupine.Unknown:
		t.Fatalf("porcupine could not decide in 30 s on %d operations", len(history))
	default:
		path := filepath.Join(os.TempDir(), fmt.Sprintf("kite-raftsql-linearizability-%d.html", time.Now().UnixNano()))
		if err := porcupine.VisualizePath(registerModel, info, path); err != nil {
			path = "(visualization failed: " + err.Error() + ")"
		}
		t.Fatalf("history of %d operations is not linearizable; visualization: %s", len(history), path)
	}
}

// ctlEndpointStatus is one entry of `etcdctl endpoint status -w json`.
type ctlEndpointStatus struct {
	Endpoint string
	Status   struct {
		Header struct {
			MemberID uint64 `json:"member_id"`
			RaftTerm uint64 `json:"raft_term"`
		} `json:"header"`
		Leader uint64 `json:"leader"`
	}
}

// TestRaftSQLEtcdctl: etcdctl sees the three members, and one leader.
func TestRaftSQLEtcdctl(t *testing.T) {
	c := startCluster(t, 3)
	ep := c.members[1].Endpoint

	out, err := ctl(t, ep, "", "endpoint", "status", "--cluster", "-w", "json")
	if err != nil {
		t.Fatalf("etcdctl endpoint status --cluster: %v\n%s", err, out)
	}
	var sts []ctlEndpointStatus
	if err := json.Unmarshal([]byte(out), &sts); err != nil {
		t.Fatalf("endpoint status -w json: %v\n%s", err, out)
	}
	var eps []string
	ids := map[string]uint64{}
	leaders := 0
	for _, s := range sts {
		eps = append(eps, s.Endpoint)
		if s.Status.Leader == 0 || s.Status.Leader != sts[0].Status.Leader {
			t.Errorf("endpoint %s reports leader %x, %s %x", s.Endpoint, s.Status.Leader, sts[0].Endpoint, sts[0].Status.Leader)
		}
		if s.Status.Header.MemberID == s.Status.Leader {
			leaders++
		}
		for _, m := range c.members {
			if m.Endpoint == s.Endpoint {
				ids[m.name] = s.Status.Header.MemberID
			}
		}
	}
	slices.Sort(eps)
	want := c.endpoints()
	slices.Sort(want)
	if !slices.Equal(eps, want) {
		t.Errorf("endpoint status --cluster lists endpoints %v; want %v\n%s", eps, want, out)
	}
	if leaders != 1 {
		t.Errorf("endpoint status --cluster: %d endpoints are the leader; want 1\n%s", leaders, out)
	}

	out, err = ctl(t, ep, "", "endpoint", "status", "--cluster", "-w", "table")
	if err != nil {
		t.Fatalf("etcdctl endpoint status --cluster -w table: %v\n%s", err, out)
	}
	if n := countLeaderRows(out); n != 1 {
		t.Errorf("endpoint status --cluster -w table: %d rows with IS LEADER true; want 1\n%s", n, out)
	}

	out, err = ctl(t, ep, "", "member", "list", "-w", "json")
	if err != nil {
		t.Fatalf("etcdctl member list: %v\n%s", err, out)
	}
	var ml struct {
		Members []*pb.Member `json:"members"`
	}
	if err := json.Unmarshal([]byte(out), &ml); err != nil {
		t.Fatalf("member list -w json: %v\n%s", err, out)
	}
	checkMemberList(t, c, ids, ml.Members, "etcdctl member list")
}

// countLeaderRows counts the rows of etcdctl's status table whose IS
// LEADER column says true.
func countLeaderRows(table string) int {
	col, n := -1, 0
	for _, line := range strings.Split(table, "\n") {
		// etcdctl draws the table with box-drawing characters, or ASCII.
		cells := strings.Split(strings.ReplaceAll(line, "│", "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if col < 0 {
			col = slices.Index(cells, "IS LEADER")
			continue
		}
		if col < len(cells) && cells[col] == "true" {
			n++
		}
	}
	return n
}
