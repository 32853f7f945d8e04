package test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Membership changes in raftsql mode, done as an etcd operator does them:
// etcdctl's member add / remove / update / promote (clientv3 here), then
// the new member started with --initial-cluster-state existing.
// KITE_TEST_AGAINST_ETCD=1 runs the same tests on etcd members.

// isErr reports whether err is etcd's error want, whichever side of the
// client's conversion it is on.
func isErr(err, want error) bool {
	return err != nil && rpctypes.ErrorDesc(err) == rpctypes.ErrorDesc(want)
}

// checkLiveMembers checks that every live member lists exactly the live
// members, by name, peer URL and client URL, and learner as said.
func checkLiveMembers(t *testing.T, ctx context.Context, c *cluster, learners ...string) {
	t.Helper()
	var want []string
	for _, m := range c.live() {
		want = append(want, fmt.Sprintf("%s %s %s learner=%v", m.name, m.peerURL, m.Endpoint, slices.Contains(learners, m.name)))
	}
	slices.Sort(want)
	deadline := time.Now().Add(15 * time.Second)
	for _, m := range c.live() {
		if slices.Contains(learners, m.name) {
			continue // a learner answers no MemberList, as etcd's
		}
		for {
			resp, err := m.Client.MemberList(ctx, clientv3.WithSerializable())
			var got []string
			if err == nil {
				for _, pm := range resp.Members {
					got = append(got, fmt.Sprintf("%s %s %s learner=%v", pm.Name, strings.Join(pm.PeerURLs, ","), strings.Join(pm.ClientURLs, ","), pm.IsLearner))
				}
				slices.Sort(got)
			}
			if err == nil && slices.Equal(got, want) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("member list on %s: %v %v\nwant %v", m.name, got, err, want)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// removeMember removes m through via and waits until m, told of its
// removal, stops by itself, as etcd's members do.
func removeMember(t *testing.T, ctx context.Context, via, m *clusterMember) {
	t.Helper()
	id := m.memberID(t)
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := via.Client.MemberRemove(ctx, id)
		if err == nil {
			break
		}
		if !isErr(err, rpctypes.ErrGRPCUnhealthy) || time.Now().After(deadline) {
			t.Fatalf("member remove %s through %s: %v", m.name, via.name, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	m.removed = true
	select {
	case <-m.exited:
	case <-time.After(20 * time.Second):
		t.Fatalf("removed member %s still running 20 s after its removal\nlog:\n%s", m.name, m.log.Tail(8192))
	}
	if out := m.log.Tail(1 << 20); !strings.Contains(out, "permanently removed") {
		t.Errorf("removed member %s stopped without saying it was removed:\n%s", m.name, m.log.Tail(4096))
	}
	m.Kill() // reaps it
}

// TestRaftSQLScaleThreeFiveFour: the operator's scaling procedure on a
// cluster that serves writes and watches throughout: two members added
// one by one (3 → 5), then one removed (5 → 4). No acknowledged write is
// lost, every watcher sees the same dense sequence, the members converge
// to the same HashKV, and the removed member refuses to come back on its
// old data.
func TestRaftSQLScaleThreeFiveFour(t *testing.T) {
	c := startCluster(t, 3)
	ctx := testCtx(t, 3*time.Minute)
	l := c.leaderIndex(t)
	victim := c.members[c.others(l)[0]]
	stay := []int{l, c.others(l)[1]}
	putEventually(t, c.members[l], "scale/0", "0", 10*time.Second)
	ws := watchEvery(ctx, t, c.procs(stay...), "scale/")
	wr := startWriters(ctx, t, c.procs(stay...), putDeleteWriter("scale/"))

	n3, resp := c.addMember(t, c.members[stay[1]], false)
	if resp.Member.Name != "" || resp.Member.IsLearner || len(resp.Members) != 4 {
		t.Errorf("member add: added %v, members %d; want an unnamed voter and 4 members", resp.Member, len(resp.Members))
	}
	n3.startJoined(t)
	n4, _ := c.addMember(t, n3, false)
	n4.startJoined(t)
	checkLiveMembers(t, ctx, c)
	newWs := watchEvery(ctx, t, c.procs(3, 4), "scale/")

	removeMember(t, ctx, c.members[stay[0]], victim)
	if i := c.leaderIndex(t); c.members[i] == victim {
		t.Fatalf("the removed member leads")
	}
	checkLiveMembers(t, ctx, c)
	time.Sleep(time.Second) // writes on the 4-member cluster
	acks, failed := wr.stop()
	t.Logf("%d acknowledged writes, failures per writer %v", len(acks), failed)
	if len(acks) == 0 {
		t.Fatal("no write was acknowledged while the cluster was scaled")
	}
	last := putEventually(t, n4, "scale/last", "x", 10*time.Second).Header.Revision
	ws.waitFor(t, c.procs(stay...), last)
	newWs.waitFor(t, c.procs(3, 4), last)
	events := append(ws.stop(), newWs.stop()...)
	checkOneOrder(t, events, last, acks)
	waitApplied(t, c, last)
	sameHashKV(t, ctx, c, last)

	// The removed member, restarted on its data dir, learns it was
	// removed and stops.
	out, code := runToExit(t, victim.args(c.token), 30*time.Second)
	if code == 0 || !strings.Contains(out, "permanently removed") {
		t.Errorf("removed member restarted on its data dir: exit code %d; want non-zero and \"permanently removed\" in:\n%s", code, out)
	}
}

// TestRaftSQLLearner: a learner added to a cluster whose log was
// compacted catches up through a snapshot of the leader's database,
// serves only serializable reads and Status while it learns, cannot be
// promoted before it has caught up, and is then promoted to a voter.
// etcd's refusals along the way: a second learner, a voter promoted, an
// unknown member removed, a peer URL already in use.
func TestRaftSQLLearner(t *testing.T) {
	c := startClusterWith(t, 3, "--snapshot-count", "50", "--snapshot-catchup-entries", "10", "--log-level", "info")
	ctx := testCtx(t, 2*time.Minute)
	l := c.leaderIndex(t)
	lead := c.members[l]
	var last int64
	for i := range 200 {
		resp, err := lead.Client.Put(ctx, fmt.Sprintf("learn/%d", i%30), strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		last = resp.Header.Revision
	}

	learner, resp := c.addMember(t, c.members[c.others(l)[0]], true)
	if !resp.Member.IsLearner {
		t.Errorf("member add --learner: added %v, not a learner", resp.Member)
	}
	id := resp.Member.ID
	// Not started: its log matches nothing of the leader's.
	if _, err := c.members[c.others(l)[1]].Client.MemberPromote(ctx, id); !isErr(err, rpctypes.ErrGRPCLearnerNotReady) {
		t.Errorf("promote of a learner that has not started: %v; want %v", err, rpctypes.ErrGRPCLearnerNotReady)
	}
	refusals := []struct {
		name string
		do   func() error
		want error
	}{
		{"second learner", func() error {
			_, err := lead.Client.MemberAddAsLearner(ctx, []string{fmt.Sprintf("http://127.0.0.1:%d", freePort(t))})
			return err
		}, rpctypes.ErrGRPCTooManyLearners},
		{"peer URL in use", func() error {
			_, err := lead.Client.MemberAddAsLearner(ctx, []string{c.members[1].peerURL})
			return err
		}, rpctypes.ErrGRPCPeerURLExist},
		{"bad peer URL", func() error {
			// Past clientv3, which checks URLs itself.
			_, err := pb.NewClusterClient(lead.Client.ActiveConnection()).MemberAdd(ctx, &pb.MemberAddRequest{PeerURLs: []string{"127.0.0.1:2380"}})
			return err
		}, rpctypes.ErrGRPCMemberBadURLs},
		{"promote a voter", func() error {
			_, err := lead.Client.MemberPromote(ctx, c.members[1].memberID(t))
			return err
		}, rpctypes.ErrGRPCMemberNotLearner},
		{"remove unknown", func() error {
			_, err := lead.Client.MemberRemove(ctx, 0x1234)
			return err
		}, rpctypes.ErrGRPCMemberNotFound},
		{"update unknown", func() error {
			_, err := lead.Client.MemberUpdate(ctx, 0x1234, []string{"http://127.0.0.1:1"})
			return err
		}, rpctypes.ErrGRPCMemberNotFound},
		{"promote unknown", func() error {
			_, err := lead.Client.MemberPromote(ctx, 0x1234)
			return err
		}, rpctypes.ErrGRPCMemberNotFound},
	}
	for _, r := range refusals {
		if err := r.do(); !isErr(err, r.want) {
			t.Errorf("%s: %v; want %v", r.name, err, r.want)
		}
	}

	learner.startJoined(t)
	if _, err := learner.Client.Get(ctx, "learn/1"); !isErr(err, rpctypes.ErrGRPCNotSupportedForLearner) {
		t.Errorf("linearizable get on the learner: %v; want %v", err, rpctypes.ErrGRPCNotSupportedForLearner)
	}
	if _, err := learner.Client.Put(ctx, "learn/x", "x"); !isErr(err, rpctypes.ErrGRPCNotSupportedForLearner) {
		t.Errorf("put on the learner: %v; want %v", err, rpctypes.ErrGRPCNotSupportedForLearner)
	}
	checkLiveMembers(t, ctx, c, learner.name)

	// Promoted once it has caught up, through a follower (which forwards
	// to the leader, as etcd's do).
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := c.members[c.others(l)[1]].Client.MemberPromote(ctx, id)
		if err == nil {
			break
		}
		if !isErr(err, rpctypes.ErrGRPCLearnerNotReady) || time.Now().After(deadline) {
			t.Fatalf("promote the learner: %v\nlearner log:\n%s", err, learner.log.Tail(8192))
		}
		time.Sleep(200 * time.Millisecond)
	}
	checkLiveMembers(t, ctx, c)
	if !againstEtcd && !strings.Contains(learner.log.Tail(1<<20), "restoring the database from the leader's snapshot") {
		t.Errorf("the learner caught up without a snapshot; the test did not test it")
	}
	got, err := learner.Client.Get(ctx, "learn/", clientv3.WithPrefix())
	if err != nil || len(got.Kvs) != 30 {
		t.Fatalf("linearizable get on the promoted member: %v %v; want 30 keys", got, err)
	}
	waitApplied(t, c, last)
	sameHashKV(t, ctx, c, last)
}

// TestRaftSQLMemberUpdate: a member's peer URL changed with member
// update; the member restarts on its data dir with the new URL and the
// cluster replicates through it.
func TestRaftSQLMemberUpdate(t *testing.T) {
	c := startCluster(t, 3)
	ctx := testCtx(t, time.Minute)
	l := c.leaderIndex(t)
	f := c.members[c.others(l)[0]]
	newURL := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	if _, err := c.members[l].Client.MemberUpdate(ctx, f.memberID(t), []string{newURL}); err != nil {
		t.Fatalf("member update: %v", err)
	}
	f.Stop()
	f.peerURL = newURL
	f.Restart()
	checkLiveMembers(t, ctx, c)
	resp, err := f.Client.Put(ctx, "upd/k", "v")
	if err != nil {
		t.Fatalf("put through the updated member: %v", err)
	}
	waitApplied(t, c, resp.Header.Revision)
	sameHashKV(t, ctx, c, resp.Header.Revision)
	// Its peers reach it at the new URL: it keeps up with writes made
	// elsewhere.
	last := putEventually(t, c.members[l], "upd/k2", "v2", 10*time.Second).Header.Revision
	got, err := f.Client.Get(ctx, "upd/k2")
	if err != nil || len(got.Kvs) != 1 || got.Header.Revision < last {
		t.Fatalf("linearizable get on the updated member: %v %v", got, err)
	}
}

// TestRaftSQLEtcdctlMemberAdd: etcdctl's own procedure, word for word: a
// member added with `etcdctl member add`, then started with exactly the
// ETCD_ variables etcdctl printed (plus its listen and data flags), listed
// by `member list`, and removed with `member remove`.
func TestRaftSQLEtcdctlMemberAdd(t *testing.T) {
	c := startCluster(t, 3)
	ctx := testCtx(t, 2*time.Minute)
	n3 := &clusterMember{c: c, name: "n3", state: "existing"}
	n3.kiteProcess = &kiteProcess{server: &server{name: n3.name}, t: t, dataDir: t.TempDir(), port: freePort(t), log: &syncBuffer{}}
	n3.Endpoint = "http://127.0.0.1:" + strconv.Itoa(n3.port)
	n3.peerURL = "http://127.0.0.1:" + strconv.Itoa(freePort(t))

	var out string
	deadline := time.Now().Add(20 * time.Second)
	for {
		var err error
		out, err = ctl(t, c.members[0].Endpoint, "", "member", "add", n3.name, "--peer-urls="+n3.peerURL)
		if err == nil {
			break
		}
		// etcd's quorum check wants peers connected for 5 s.
		if !strings.Contains(out, "unhealthy cluster") || time.Now().After(deadline) {
			t.Fatalf("etcdctl member add: %v\n%s", err, out)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("etcdctl member add:\n%s", out)
	var env []string
	for _, l := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(l, "="); ok && strings.HasPrefix(k, "ETCD_") {
			env = append(env, k+"="+strings.Trim(v, `"`))
		}
	}
	wantCluster := c.initialCluster() + "," + n3.name + "=" + n3.peerURL
	if !slices.Contains(env, "ETCD_INITIAL_CLUSTER_STATE=existing") || !slices.Contains(env, "ETCD_NAME=n3") ||
		!slices.ContainsFunc(env, func(e string) bool {
			got, ok := strings.CutPrefix(e, "ETCD_INITIAL_CLUSTER=")
			return ok && sameSet(strings.Split(got, ","), strings.Split(wantCluster, ","))
		}) {
		t.Fatalf("etcdctl member add printed %v; want ETCD_NAME=n3, ETCD_INITIAL_CLUSTER=%s, ETCD_INITIAL_CLUSTER_STATE=existing", env, wantCluster)
	}
	c.members = append(c.members, n3)
	args := []string{"--data-dir", n3.dataDir, "--listen-client-urls", n3.Endpoint, "--advertise-client-urls", n3.Endpoint,
		"--listen-peer-urls", n3.peerURL, "--heartbeat-interval", "50", "--election-timeout", "500", "--log-level", raftLogLevel}
	if err := n3.startWith(args, env); err != nil {
		t.Fatal(err)
	}
	if err := n3.waitServing(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatalf("member started from etcdctl's variables: %v\nlog:\n%s", err, n3.log.Tail(8192))
	}
	checkLiveMembers(t, ctx, c)
	list, err := ctl(t, n3.Endpoint, "", "member", "list")
	if err != nil || !strings.Contains(list, ", started, n3, "+n3.peerURL+", "+n3.Endpoint+", false") {
		t.Fatalf("etcdctl member list on the new member: %v\n%s", err, list)
	}
	resp := putEventually(t, n3, "ctl/k", "v", 10*time.Second)
	waitApplied(t, c, resp.Header.Revision)
	sameHashKV(t, ctx, c, resp.Header.Revision)

	if out, err := ctl(t, c.members[1].Endpoint, "", "member", "remove", fmt.Sprintf("%x", n3.memberID(t))); err != nil {
		t.Fatalf("etcdctl member remove: %v\n%s", err, out)
	}
	n3.removed = true
	select {
	case <-n3.exited:
	case <-time.After(20 * time.Second):
		t.Fatalf("removed member still running\nlog:\n%s", n3.log.Tail(8192))
	}
	n3.Kill()
	checkLiveMembers(t, ctx, c)
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
