package test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	_ "modernc.org/sqlite"
)

// Faults a raftsql cluster must survive beyond a SIGKILL: a follower cut
// off long enough to need the leader's database (a real partition,
// netns_test.go), a member whose data went bad, an apply that fails (a
// kitetest hook, KITE_TEST_PEER_FAULTS). Partitions of every shape are in
// partition_test.go.

// fault posts to one of member m's kitetest hooks (/kite/test/<what>).
func (m *clusterMember) fault(t *testing.T, what string) {
	t.Helper()
	resp, err := http.Post(m.peerURL+"/kite/test/"+what, "text/plain", nil)
	if err != nil {
		t.Fatalf("%s %s: %v", what, m.name, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: %s", what, m.name, resp.Status)
	}
}

// memberID is the member's ID as its Status reports it.
func (m *clusterMember) memberID(t *testing.T) uint64 {
	t.Helper()
	st, err := m.status()
	if err != nil {
		t.Fatalf("status of %s: %v", m.name, err)
	}
	return st.Header.MemberId
}

// waitApplied waits until every member has applied revision rev.
func waitApplied(t *testing.T, c *cluster, rev int64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for _, m := range c.live() {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			resp, err := m.Client.Get(ctx, "\x00", clientv3.WithSerializable())
			cancel()
			if err == nil && resp.Header.Revision >= rev {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("member %s has not applied revision %d: %v %v", m.name, rev, resp, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// TestRaftSQLSnapshotCatchUp: a follower cut off while the others write
// well past their snapshot and log compaction needs entries the leader no
// longer has; it is sent the leader's database, reloads from it, and its
// watchers, connected throughout, get every event they missed, in order,
// as if nothing had happened.
func TestRaftSQLSnapshotCatchUp(t *testing.T) {
	if againstEtcd {
		t.Skip("the cluster is kite's raftsql")
	}
	// Info level: the follower's log must show that it restored a snapshot.
	nw := newNetnsNet(t, 3)
	c := nw.cluster(t, "--snapshot-count", "50", "--snapshot-catchup-entries", "10", "--log-level", "info")
	ctx := testCtx(t, 2*time.Minute)
	l := c.leaderIndex(t)
	fi := c.others(l)[0]
	f, w := c.members[fi], c.members[c.others(l)[1]]
	putEventually(t, f, "snap/0", "0", 10*time.Second)
	ws := watchEvery(ctx, t, c.procs(), "snap/")

	for _, o := range c.others(fi) {
		nw.cutFrom(t, fi, o)
		nw.cutFrom(t, o, fi)
	}
	// Unlike a hook that drops raft's messages, a real cut leaves them in
	// the leader's TCP send buffer, where a heal would deliver them and the
	// follower catch up without a snapshot. Big values fill that buffer;
	// the stream's 5 s write timeout then closes it, raft marks the
	// follower unreachable, and the writes after that reach it only as
	// the leader's snapshot.
	big := strings.Repeat("s", 32<<10)
	var last int64
	put := func(i int, v string) {
		resp, err := w.Client.Put(ctx, fmt.Sprintf("snap/%d", i%40), v)
		if err != nil {
			t.Fatalf("put %d through %s: %v", i, w.name, err)
		}
		last = resp.Header.Revision
	}
	for i := 1; i <= 300; i++ {
		put(i, big)
	}
	for i, until := 301, time.Now().Add(7*time.Second); time.Now().Before(until); i++ {
		put(i, fmt.Sprint(i))
		time.Sleep(10 * time.Millisecond)
	}
	nw.healAll(t)
	ws.waitFor(t, c.procs(), last)
	events := ws.stop()
	checkOneOrder(t, events, last, nil)
	if !strings.Contains(f.log.Tail(1<<20), "restoring the database from the leader's snapshot") {
		t.Errorf("the cut-off follower caught up without a snapshot; the test did not test it")
	}
	waitApplied(t, c, last)
	sameHashKV(t, ctx, c, last)
	// Its own state after the restore: a serializable read of everything.
	want, err := w.Client.Get(ctx, "snap/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	got, err := f.Client.Get(ctx, "snap/", clientv3.WithPrefix(), clientv3.WithSerializable(), clientv3.WithRev(want.Header.Revision))
	if err != nil || len(got.Kvs) != len(want.Kvs) {
		t.Fatalf("restored follower's keys: %v %v; want %d keys", got, err, len(want.Kvs))
	}
	for i := range want.Kvs {
		if string(got.Kvs[i].Value) != string(want.Kvs[i].Value) || got.Kvs[i].ModRevision != want.Kvs[i].ModRevision {
			t.Fatalf("restored follower's key %s: %v; want %v", want.Kvs[i].Key, got.Kvs[i], want.Kvs[i])
		}
	}
}

// TestRaftSQLCorruptionCheck: a member whose database was changed behind
// raft's back hashes differently; the leader's periodic check finds it and
// raises etcd's CORRUPT alarm, after which writes are refused with etcd's
// "corrupt cluster" until the alarm is disarmed.
func TestRaftSQLCorruptionCheck(t *testing.T) {
	if againstEtcd {
		t.Skip("etcd's check is configured by other flags")
	}
	c := startClusterWith(t, 3, "--corrupt-check-time", "1s")
	ctx := testCtx(t, 2*time.Minute)
	l := c.leaderIndex(t)
	victim := c.members[c.others(l)[0]]
	for i := range 20 {
		putEventually(t, c.members[l], fmt.Sprintf("cc/%d", i), "good", 10*time.Second)
	}
	victim.Stop()
	db, err := sql.Open("sqlite", filepath.Join(victim.dataDir, "kite.db"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := db.Exec(`UPDATE kv SET value = CAST('bad' AS BLOB) WHERE key = CAST('cc/7' AS BLOB)`)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("corrupted %d rows, want 1", n)
	}
	db.Close()
	victim.Restart()

	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := c.members[l].Client.AlarmList(ctx)
		if err == nil && len(resp.Alarms) > 0 {
			if a := resp.Alarms[0]; a.Alarm != pb.AlarmType_CORRUPT {
				t.Fatalf("alarm raised: %v; want CORRUPT", a)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no CORRUPT alarm 30 s after a member's data changed behind raft: %v %v", resp, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	_, err = c.members[l].Client.Put(ctx, "cc/after", "x")
	if !errors.Is(err, rpctypes.ErrCorrupt) {
		t.Fatalf("put with CORRUPT raised: %v; want %v", err, rpctypes.ErrCorrupt)
	}
}

// TestRaftSQLMoveLeader: etcd's MoveLeader through the leader hands
// leadership to the member named; through a follower it is refused with
// "not leader", to an unknown member with "bad leader transferee".
func TestRaftSQLMoveLeader(t *testing.T) {
	c := startCluster(t, 3)
	ctx := testCtx(t, time.Minute)
	l := c.leaderIndex(t)
	target := c.members[c.others(l)[0]]
	tid := target.memberID(t)
	follower := c.members[c.others(l)[1]]
	if _, err := follower.Client.MoveLeader(ctx, tid); !errors.Is(err, rpctypes.ErrNotLeader) {
		t.Errorf("MoveLeader through a follower: %v; want %v", err, rpctypes.ErrNotLeader)
	}
	if _, err := c.members[l].Client.MoveLeader(ctx, tid^1); !errors.Is(err, rpctypes.ErrBadLeaderTransferee) {
		t.Errorf("MoveLeader to an unknown member: %v; want %v", err, rpctypes.ErrBadLeaderTransferee)
	}
	if _, err := c.members[l].Client.MoveLeader(ctx, tid); err != nil {
		t.Fatalf("MoveLeader to %s: %v", target.name, err)
	}
	if got := c.members[c.leaderIndex(t)]; got != target {
		t.Fatalf("leader after MoveLeader is %s; want %s", got.name, target.name)
	}
	putEventually(t, follower, "ml/after", "1", 10*time.Second)
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestRaftSQLMemberListWithMemberDown: a member that is down is still
// listed with its client URLs, as etcd lists it, so endpoint status
// --cluster reports it as unreachable instead of leaving it out.
func TestRaftSQLMemberListWithMemberDown(t *testing.T) {
	c := startCluster(t, 3)
	ctx := testCtx(t, time.Minute)
	// Every member has been listed once: the URLs are known.
	if _, err := c.members[0].Client.MemberList(ctx); err != nil {
		t.Fatal(err)
	}
	c.members[2].Kill()
	resp, err := c.members[0].Client.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range resp.Members {
		if m.Name == c.members[2].name {
			if len(m.ClientURLs) != 1 || m.ClientURLs[0] != c.members[2].Endpoint {
				t.Fatalf("down member %s listed with client URLs %v; want [%s]", m.Name, m.ClientURLs, c.members[2].Endpoint)
			}
			return
		}
	}
	t.Fatalf("down member %s not listed: %v", c.members[2].name, resp.Members)
}

// TestRaftSQLApplyFailureStopsMember: a member whose database refuses a
// committed write stops instead of serving a state that differs from the
// others'; the cluster goes on, and the member restarted replays the
// entry from its WAL and converges. The fault (the kite-only fail-apply
// test hook) fails the next Put statement inside the SQLite transaction
// that applies the entry, as a real storage error would (with
// --raft-apply-behind=false); applied behind the WAL (the default) the
// entry is applied in memory first and the fault fails the flush that
// moves it into SQLite, which must stop the member the same way.
func TestRaftSQLApplyFailureStopsMember(t *testing.T) {
	if againstEtcd {
		t.Skip("the fault is a kite test hook")
	}
	for _, tc := range []struct {
		name  string
		flags []string
	}{
		{"apply commits SQLite", []string{"--raft-apply-behind=false"}},
		{"applied behind", nil},
	} {
		t.Run(tc.name, func(t *testing.T) { applyFailureStopsMember(t, tc.flags) })
	}
}

func applyFailureStopsMember(t *testing.T, flags []string) {
	c := startClusterWith(t, 3, flags...)
	ctx := testCtx(t, time.Minute)
	l := c.leaderIndex(t)
	others := c.others(l)
	f, g := c.members[others[0]], c.members[others[1]]
	f.fault(t, "fail-apply")
	if _, err := c.members[l].Client.Put(ctx, "fail/1", "a"); err != nil {
		t.Fatalf("put through the leader: %v", err)
	}
	select {
	case <-f.exited:
	case <-time.After(20 * time.Second):
		t.Fatalf("member %s still running after its apply failed\nlog:\n%s", f.name, f.log.Tail(8192))
	}
	// The stop names the storage error of the entry, raised in the
	// transaction applying it.
	out := f.log.Tail(1 << 20)
	if !strings.Contains(out, "raftsql node stopped") || !strings.Contains(out, "the database refused the write") ||
		f.proc.State().ExitCode() == 0 {
		t.Fatalf("member %s exited (%v) without reporting the failed apply:\n%s", f.name, f.proc.State(), f.log.Tail(4096))
	}
	if resp, err := http.Get(f.Endpoint + "/readyz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatalf("member %s /readyz is ready after its apply failed", f.name)
		}
	}
	// The others go on: a quorum of two commits writes through either.
	last := putEventually(t, c.members[l], "fail/2", "b", 10*time.Second).Header.Revision
	r3, err := g.Client.Put(ctx, "fail/3", "c")
	if err != nil {
		t.Fatalf("put through the other follower %s: %v", g.name, err)
	}
	last = r3.Header.Revision
	f.Kill()
	f.Restart()
	waitApplied(t, c, last)
	sameHashKV(t, ctx, c, last)
	got, err := f.Client.Get(ctx, "fail/", clientv3.WithPrefix(), clientv3.WithSerializable())
	if err != nil || len(got.Kvs) != 3 {
		t.Fatalf("restarted member's keys: %v %v; want fail/1, fail/2 and fail/3", got, err)
	}
}
