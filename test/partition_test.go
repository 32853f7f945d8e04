package test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Real partitions of a 3-member raftsql cluster: every member in a network
// namespace of its own (netns_test.go), links cut by nftables drop rules,
// so raft's TCP streams lose packets as on a broken network, instead of the
// member dropping its own messages (the KITE_TEST_PEER_FAULTS hook of
// raftfaults_test.go). Throughout each test a writer runs through every
// member and a watcher watches on every member; afterwards every
// acknowledged write is in the one gap-free, duplicate-free event order
// that every watcher saw, and HashKV agrees at the last revision.
//
//   - TestPartitionLeaderIsolated: the leader cut off both ways from both
//     followers acknowledges no write and serves no linearizable read; the
//     followers elect a leader and writes go on through them; healed, the
//     old leader follows, has every write and none of its own sent alone.
//   - TestPartitionFollowerIsolated: a follower whose own firewall shuts
//     out its peers (its sends fail at once, not by timeout) serves no
//     linearizable read nor write while the leader and the other follower
//     keep writing; healed, it catches up.
//   - TestPartitionRollingSplit: 1|2 splits made by the majority's
//     firewalls, first with the leader as the minority, then, healed, with
//     a follower of the new leader: a cluster partitioned again right after
//     healing loses nothing and converges.
//   - TestPartitionOneWay: the leader hears the followers but they do not
//     hear it: they elect a leader of their own (pre-vote does not keep a
//     leader nobody hears), and nothing acknowledged is lost. TCP makes the
//     one-way cut two-way within seconds (the leader's acknowledgements do
//     not arrive), which is what a half-broken link does to raft too.
//
// They skip when not root or without ip and nft, except under CI=true.
// With KITE_TEST_AGAINST_ETCD=1 the members are etcd's, which pass them.

const partitionPrefix = "part/"

// partitionRun is one test's cluster, network, writers and watchers.
type partitionRun struct {
	t   *testing.T
	ctx context.Context
	nw  *netnsNet
	c   *cluster
	ids []uint64
	ws  *watchers
	wr  *writers
}

func startPartitionRun(t *testing.T) *partitionRun {
	t.Helper()
	nw := newNetnsNet(t, 3)
	c := nw.cluster(t)
	r := &partitionRun{t: t, ctx: testCtx(t, 2*time.Minute), nw: nw, c: c}
	for _, m := range c.members {
		r.ids = append(r.ids, m.memberID(t))
	}
	putEventually(t, c.members[c.leaderIndex(t)], partitionPrefix+"first", "1", 10*time.Second)
	r.ws = watchEvery(r.ctx, t, c.procs(), partitionPrefix)
	write := putDeleteWriter(partitionPrefix)
	// Paced: the machine is shared, and a few hundred writes a second
	// already fill every stretch of the test with revisions.
	r.wr = startWriters(r.ctx, t, c.procs(), func(ctx context.Context, c *clientv3.Client, i, n int) (ack, error) {
		time.Sleep(5 * time.Millisecond)
		return write(ctx, c, i, n)
	})
	return r
}

// leaderAmong waits until every member of idx names the same leader, one
// of idx and not the member with ID not, and returns its index.
func (r *partitionRun) leaderAmong(idx []int, not uint64) int {
	r.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		leader, agreed := uint64(0), true
		for _, i := range idx {
			st, err := r.c.members[i].status()
			if err != nil || st.Leader == 0 || (leader != 0 && st.Leader != leader) {
				last, agreed = fmt.Sprintf("%s: %v %v", r.c.members[i].name, st, err), false
				break
			}
			leader = st.Leader
		}
		if agreed && leader != not {
			for _, i := range idx {
				if r.ids[i] == leader {
					return i
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.t.Fatalf("members %v agree on no leader among them within 15 s (last: %s)", idx, last)
	return -1
}

// acks is how many writes the writer through member i has had acknowledged.
func (r *partitionRun) acks(i int) int {
	r.wr.mu.Lock()
	defer r.wr.mu.Unlock()
	n := 0
	for _, a := range r.wr.acks {
		if strings.HasPrefix(a.key, fmt.Sprintf("%ss%d/", partitionPrefix, i)) {
			n++
		}
	}
	return n
}

// majorityWrites waits until the writers through idx have had n more
// writes acknowledged: the majority goes on.
func (r *partitionRun) majorityWrites(idx []int, n int) {
	r.t.Helper()
	count := func() int {
		total := 0
		for _, i := range idx {
			total += r.acks(i)
		}
		return total
	}
	start := count()
	deadline := time.Now().Add(15 * time.Second)
	for count() < start+n {
		if time.Now().After(deadline) {
			r.t.Fatalf("the majority %v had %d writes acknowledged in 15 s; want %d", idx, count()-start, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// refuses checks that member i, cut off from a quorum, serves no
// linearizable read and acknowledges no put, and returns the key it was
// sent.
func (r *partitionRun) refuses(i int, key string) {
	r.t.Helper()
	m := r.c.members[i]
	ctx, cancel := context.WithTimeout(r.ctx, 2*time.Second)
	defer cancel()
	if resp, err := m.Client.Get(ctx, partitionPrefix+"first"); err == nil {
		r.t.Errorf("linearizable get through %s, cut off from the quorum, answered: %s", m.name, showGet(resp, nil))
	}
	ctx, cancel = context.WithTimeout(r.ctx, 2*time.Second)
	defer cancel()
	if resp, err := m.Client.Put(ctx, key, "alone"); err == nil {
		r.t.Errorf("put of %s through %s, cut off from the quorum, acknowledged at revision %d", key, m.name, resp.Header.Revision)
	}
}

// converge stops the writers, writes once more through member via, and
// checks every member: applied up to that write, the same HashKV, and
// watchers that saw one dense order without duplicates holding every
// acknowledged write.
func (r *partitionRun) converge(via int) int64 {
	t := r.t
	t.Helper()
	acks, failed := r.wr.stop()
	last := putEventually(t, r.c.members[via], partitionPrefix+"last", "1", 20*time.Second).Header.Revision
	t.Logf("%d writes acknowledged, failed per member %v; last revision %d", len(acks), failed, last)
	waitApplied(t, r.c, last)
	r.ws.waitFor(t, r.c.procs(), last)
	events := r.ws.stop()
	checkOneOrder(t, events, last, acks)
	// One event per revision: the writes are single puts and deletes.
	for i, evs := range events {
		for j := 1; j < len(evs); j++ {
			if evs[j].Rev <= evs[j-1].Rev {
				t.Errorf("member %s's watcher saw revision %d after %d", r.c.members[i].name, evs[j].Rev, evs[j-1].Rev)
				break
			}
		}
	}
	sameHashKV(t, r.ctx, r.c, last)
	return last
}

// absent checks that no member has key.
func (r *partitionRun) absent(key string) {
	r.t.Helper()
	for _, m := range r.c.members {
		resp, err := m.Client.Get(r.ctx, key)
		if err != nil || len(resp.Kvs) != 0 {
			r.t.Errorf("%s, sent only to a member cut off from the quorum, on %s: %s", key, m.name, showGet(resp, err))
		}
	}
}

// followsAgain waits until member i, healed, names a leader other than
// the member with ID not.
func (r *partitionRun) followsAgain(i int, not uint64) {
	r.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err := r.c.members[i].status()
		if err == nil && st.Leader != 0 && st.Leader != not {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("healed member %s does not follow a new leader: %v %v", r.c.members[i].name, st, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestPartitionLeaderIsolated(t *testing.T) {
	r := startPartitionRun(t)
	l := r.c.leaderIndex(t)
	others := r.c.others(l)
	// Two leases granted before the cut, one kept alive through the
	// majority throughout, one left alone.
	kept, left := r.leaseWithKey(l, "kept"), r.leaseWithKey(l, "left")
	for _, o := range others {
		r.nw.cutFrom(t, l, o)
		r.nw.cutFrom(t, o, l)
	}
	n := r.leaderAmong(others, r.ids[l])
	t.Logf("leader %s isolated; %s elected", r.c.members[l].name, r.c.members[n].name)
	stopKeepAlive := r.keepAlive(n, kept)
	r.majorityWrites(others, 30)
	// Leases expire only by the majority's leader: the one left alone
	// goes, the one kept alive through the majority stays, whatever the
	// old leader's clock says.
	waitUntil(t, 20*time.Second, "the majority to expire the lease left alone", func() bool {
		return !r.leaseKeyOn(n, "left")
	})
	if !r.leaseKeyOn(n, "kept") {
		t.Fatalf("the lease kept alive through the majority expired")
	}
	alone := partitionPrefix + "alone"
	r.refuses(l, alone)
	// Cut off, it knows no leader, and etcd's /health says so; a
	// serializable read still answers from its own state.
	old := r.c.members[l]
	waitUntil(t, 10*time.Second, "/health of the isolated leader to say RAFT NO LEADER", func() bool {
		code, body := httpGet(t, old.Endpoint+"/health")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "RAFT NO LEADER")
	})
	if resp, err := old.Client.Get(r.ctx, partitionPrefix+"first", clientv3.WithSerializable()); err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("serializable get through the isolated leader: %v %v", resp, err)
	}
	r.majorityWrites(others, 10)
	r.nw.healAll(t)
	r.followsAgain(l, r.ids[l])
	r.converge(l)
	r.absent(alone)
	stopKeepAlive()
	for i := range r.c.members {
		if !r.leaseKeyOn(i, "kept") || r.leaseKeyOn(i, "left") {
			t.Fatalf("after the heal %s has kept: %v, left: %v; want the kept lease's key only", r.c.members[i].name, r.leaseKeyOn(i, "kept"), r.leaseKeyOn(i, "left"))
		}
	}
	t.Logf("leases %x (kept alive) and %x (left alone) as the majority decided", kept, left)
}

// leasePrefix holds the keys of the partition tests' leases, inside the
// watched prefix: their puts and revokes take revisions of the one dense
// order the watchers check.
const leasePrefix = partitionPrefix + "lease/"

// leaseWithKey grants a 4 s lease through member i and attaches key name
// to it.
func (r *partitionRun) leaseWithKey(i int, name string) clientv3.LeaseID {
	r.t.Helper()
	c := r.c.members[i].Client
	g, err := c.Grant(r.ctx, 4)
	if err != nil {
		r.t.Fatalf("grant through %s: %v", r.c.members[i].name, err)
	}
	if _, err := c.Put(r.ctx, leasePrefix+name, "x", clientv3.WithLease(g.ID)); err != nil {
		r.t.Fatalf("put %s: %v", name, err)
	}
	return g.ID
}

// leaseKeyOn reports whether member i's own state holds the lease key
// name (a serializable read).
func (r *partitionRun) leaseKeyOn(i int, name string) bool {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(r.ctx, 5*time.Second)
	defer cancel()
	resp, err := r.c.members[i].Client.Get(ctx, leasePrefix+name, clientv3.WithSerializable())
	if err != nil {
		r.t.Fatalf("get %s through %s: %v", name, r.c.members[i].name, err)
	}
	return len(resp.Kvs) == 1
}

// keepAlive renews lease id through member i twice a second until the
// returned stop is called; a renewal that fails while the cluster elects
// is retried.
func (r *partitionRun) keepAlive(i int, id clientv3.LeaseID) (stop func()) {
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		for {
			ctx, cancel := context.WithTimeout(r.ctx, time.Second)
			_, _ = r.c.members[i].Client.KeepAliveOnce(ctx, id)
			cancel()
			select {
			case <-done:
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	return func() { close(done); <-exited }
}

func TestPartitionFollowerIsolated(t *testing.T) {
	r := startPartitionRun(t)
	l := r.c.leaderIndex(t)
	f := r.c.others(l)[0]
	// The follower's own firewall, both ways: its sends to the peers fail
	// at once with EPERM instead of going unanswered.
	r.nw.drop(t, f, "input", r.c.others(f)...)
	r.nw.drop(t, f, "output", r.c.others(f)...)
	r.majorityWrites(r.c.others(f), 30)
	alone := partitionPrefix + "alone"
	r.refuses(f, alone)
	r.majorityWrites(r.c.others(f), 10)
	r.nw.healAll(t)
	r.converge(f)
	r.absent(alone)
	if now := r.c.leaderIndex(t); now != l {
		// Pre-vote should keep the returning follower from deposing the
		// leader; an election on a loaded machine may still happen.
		t.Logf("leader changed from %s to %s across the follower's isolation", r.c.members[l].name, r.c.members[now].name)
	}
}

func TestPartitionRollingSplit(t *testing.T) {
	r := startPartitionRun(t)
	// split cuts member minority off by the firewalls of the two others.
	split := func(minority int) {
		for _, o := range r.c.others(minority) {
			r.nw.drop(t, o, "input", minority)
			r.nw.drop(t, o, "output", minority)
		}
	}
	l := r.c.leaderIndex(t)
	split(l)
	n := r.leaderAmong(r.c.others(l), r.ids[l])
	t.Logf("split 1|2 with the leader %s alone; %s elected", r.c.members[l].name, r.c.members[n].name)
	r.majorityWrites(r.c.others(l), 30)
	r.refuses(l, partitionPrefix+"alone1")
	r.nw.healAll(t)
	r.followsAgain(l, r.ids[l])

	n = r.c.leaderIndex(t)
	f := r.c.others(n)[0]
	split(f)
	r.majorityWrites(r.c.others(f), 30)
	t.Logf("split 1|2 with the follower %s alone, leader %s", r.c.members[f].name, r.c.members[n].name)
	r.refuses(f, partitionPrefix+"alone2")
	r.majorityWrites(r.c.others(f), 10)
	r.nw.healAll(t)
	r.converge(f)
	r.absent(partitionPrefix + "alone1")
	r.absent(partitionPrefix + "alone2")
}

func TestPartitionOneWay(t *testing.T) {
	r := startPartitionRun(t)
	l := r.c.leaderIndex(t)
	others := r.c.others(l)
	for _, o := range others {
		r.nw.cutFrom(t, l, o)
	}
	n := r.leaderAmong(others, r.ids[l])
	t.Logf("leader %s unheard; %s elected", r.c.members[l].name, r.c.members[n].name)
	r.majorityWrites(others, 30)
	// Not checked absent afterwards: a put the old leader forwards may sit
	// in its TCP send buffer and reach the new leader once healed, which
	// is a write whose client timed out, not one acknowledged.
	r.refuses(l, partitionPrefix+"alone")
	r.majorityWrites(others, 10)
	r.nw.healAll(t)
	r.followsAgain(l, r.ids[l])
	r.converge(l)
}
