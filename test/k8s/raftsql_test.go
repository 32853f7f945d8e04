package k8s

// Raftsql mode (KITE_K8S_DATASTORE=raftsql): every kite the suite starts is
// one member of a fresh 3-member raft cluster. The two other members are
// kites of their own, started alongside it with etcd's cluster flags (as
// the main module's test/harness.go raftPeers does) as child processes that
// die with the test process (Pdeathsig), and are killed when the test's
// kite is stopped. Each member keeps its applied state in kite.db of its
// own data dir and its raft log in member/wal.
//
// The suite's clients talk to the one member the suite started, as in the
// other modes (a follower or the leader as the election falls): that keeps
// runServer and the server options (--watch-progress-notify-interval,
// given to the member under test only) the same in every mode, while every
// write still goes through raft and a quorum of the cluster.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kite-db/kite/internal/testenv"
)

// raftMember is a companion member of the cluster of a kite under test.
type raftMember struct {
	name     string
	endpoint string // client URL
	dataDir  string
	proc     *testenv.Process
	logs     testenv.LogBuffer
}

// raftCluster is what startRaftPeers started for one kite under test.
type raftCluster struct {
	flags []string // the flags that make the kite under test the third member
	peers []*raftMember
}

// startRaftPeers starts the two other members of a new 3-member cluster
// whose third member is the kite named name, and returns them with the
// flags that kite needs. The caller stops them (stop) once that kite has
// stopped.
func startRaftPeers(t testing.TB, name string) (*raftCluster, error) {
	names := []string{name, name + "-p1", name + "-p2"}
	peerURLs := make([]string, len(names))
	var initial []string
	for i, n := range names {
		port, err := testenv.FreePort()
		if err != nil {
			return nil, err
		}
		peerURLs[i] = "http://127.0.0.1:" + strconv.Itoa(port)
		initial = append(initial, n+"="+peerURLs[i])
	}
	common := []string{
		"--initial-cluster", strings.Join(initial, ","),
		"--initial-cluster-state", "new",
		"--initial-cluster-token", fmt.Sprintf("kite-k8s-%d", time.Now().UnixNano()),
	}
	c := &raftCluster{
		flags: append([]string{"--listen-peer-urls", peerURLs[0], "--initial-advertise-peer-urls", peerURLs[0]}, common...),
	}
	for i := 1; i < len(names); i++ {
		port, err := testenv.FreePort()
		if err != nil {
			c.stop()
			return nil, err
		}
		m := &raftMember{
			name:     names[i],
			endpoint: "http://127.0.0.1:" + strconv.Itoa(port),
			dataDir:  filepath.Join(t.TempDir(), "data"),
		}
		args := append([]string{
			"--name", m.name,
			"--data-dir", m.dataDir,
			"--listen-client-urls", m.endpoint,
			"--advertise-client-urls", m.endpoint,
			"--listen-peer-urls", peerURLs[i],
			"--initial-advertise-peer-urls", peerURLs[i],
			"--log-level", "warn",
		}, append(common, kiteFlags...)...)
		proc, err := testenv.Start(testenv.Command{Argv: append([]string{kiteBin}, args...), Out: &m.logs})
		if err != nil {
			c.stop()
			return nil, fmt.Errorf("start raft member %s: %w", m.name, err)
		}
		m.proc = proc
		c.peers = append(c.peers, m)
	}
	return c, nil
}

// stop kills the companion members and waits for them; their data dirs go
// with the test's temporary directory.
func (c *raftCluster) stop() {
	if c == nil {
		return
	}
	for _, m := range c.peers {
		m.proc.Kill()
	}
}

// logs returns the companion members' output, for a failed start or test.
func (c *raftCluster) logs() string {
	if c == nil {
		return ""
	}
	var b strings.Builder
	for _, m := range c.peers {
		if m.logs.Len() > 0 {
			fmt.Fprintf(&b, "raft member %s output:\n%s\n", m.name, m.logs.String())
		}
	}
	return b.String()
}

// checkRaftStorage is TestStorageUnderTest's raftsql case: the kite under
// test is a member of a 3-member cluster whose other members are the
// companions the suite started, each member has its own kite.db and raft
// log, and a put through the kite under test reaches the companions' own
// databases (a serializable Get answers from the member's local state).
func checkRaftStorage(t *testing.T, ctx context.Context, k kiteServer, client *clientv3.Client, resp *clientv3.PutResponse) {
	if k.dsn != "" {
		t.Fatalf("raftsql mode, but kite runs on %s", k.dsn)
	}
	if len(k.raft) != 2 {
		t.Fatalf("raftsql mode, but the suite started %d companion members, want 2", len(k.raft))
	}
	dirs := map[string]string{"kite under test": k.dataDir}
	for _, m := range k.raft {
		dirs[m.name] = m.dataDir
	}
	for who, dir := range dirs {
		for _, p := range []string{"kite.db", filepath.Join("member", "wal")} {
			if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
				t.Errorf("raftsql mode, but %s has no %s in its data dir: %v", who, p, err)
			}
		}
	}
	members, err := client.MemberList(ctx)
	if err != nil {
		t.Fatalf("MemberList: %v", err)
	}
	want := map[string]bool{k.endpoint: true}
	for _, m := range k.raft {
		want[m.endpoint] = true
	}
	if len(members.Members) != 3 {
		t.Errorf("MemberList has %d members, want 3: %v", len(members.Members), members.Members)
	}
	for _, m := range members.Members {
		if len(m.ClientURLs) != 1 || !want[m.ClientURLs[0]] {
			t.Errorf("MemberList: member %s with client URLs %v, want one of %v", m.Name, m.ClientURLs, want)
		}
	}
	for _, m := range k.raft {
		peer, err := clientv3.New(clientv3.Config{Endpoints: []string{m.endpoint}, DialTimeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer peer.Close()
		var last string
		for {
			got, err := peer.Get(ctx, "/registry/kite-k8s/where", clientv3.WithSerializable())
			if err == nil && len(got.Kvs) == 1 && string(got.Kvs[0].Value) == "here" && got.Kvs[0].ModRevision == resp.Header.Revision {
				t.Logf("member %s has the key at revision %d in its own database", m.name, got.Kvs[0].ModRevision)
				break
			}
			if err != nil {
				last = err.Error()
			} else {
				last = fmt.Sprintf("%d kvs at revision %d", len(got.Kvs), got.Header.Revision)
			}
			select {
			case <-ctx.Done():
				t.Fatalf("member %s: the key put at revision %d never reached its database (last: %s)", m.name, resp.Header.Revision, last)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
}
