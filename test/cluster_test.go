package test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/etcdmain"

	"github.com/kite-db/kite/internal/testenv"
)

// Harness for the raftsql tests: a cluster of kite processes started with
// etcd's own clustering flags, each a direct child of the test.
//
// With KITE_TEST_AGAINST_ETCD=1 every member is a real etcd instead (the
// test binary re-executed as etcd), which proves the tests on etcd.
// KITE_TEST_RAFT_LOG_LEVEL sets the members' --log-level (default warn).

// etcdMemberEnv, set in a child's environment, makes the test binary run
// etcd's main with its arguments instead of the tests.
const etcdMemberEnv = "KITE_TEST_ETCD_MEMBER"

func init() {
	if os.Getenv(etcdMemberEnv) == "1" {
		etcdmain.Main(append([]string{"etcd"}, os.Args[1:]...))
		os.Exit(0)
	}
}

var raftLogLevel = envOr("KITE_TEST_RAFT_LOG_LEVEL", "warn")

// cluster is n members bootstrapped together (--initial-cluster-state new).
type cluster struct {
	t       *testing.T
	token   string
	members []*clusterMember
	// extra flags every member gets after the bootstrap ones.
	extra []string
	// scheme of the peer URLs ("http" unless the test sets up peer TLS);
	// perMember, if set, adds flags of member i's own.
	scheme    string
	perMember func(i int) []string
	// prepare, if set, runs for each member before any starts (with the
	// ports, data dir and token chosen), e.g. to restore a snapshot.
	prepare func(c *cluster, m *clusterMember)
	// wrap, if set, changes a member's command before it starts, e.g. to
	// run it in a network namespace of the test's.
	wrap func(m *clusterMember, cmd *testenv.Command)
}

// clusterMember is one member. It is a kiteProcess so that the fleet
// helpers (watchEvery, startWriters, waitFor) take it as any other server,
// and so that Kill and the cleanup are the harness's; it has its own
// command line and so its own start and Restart.
type clusterMember struct {
	*kiteProcess
	c       *cluster
	name    string
	peerURL string
	// state is its --initial-cluster-state ("new" when empty): "existing"
	// for a member added to the running cluster (addMember).
	state string
	// removed: taken out of the cluster by MemberRemove; no longer in
	// --initial-cluster nor among the members the checks visit.
	removed bool
}

// startCluster starts n members on fresh data dirs and waits until each
// serves and all agree on a leader.
func startCluster(t *testing.T, n int) *cluster {
	t.Helper()
	return startClusterWith(t, n)
}

// startClusterWith is startCluster with extra flags for every member.
func startClusterWith(t *testing.T, n int, extra ...string) *cluster {
	t.Helper()
	return startClusterOf(t, n, &cluster{extra: extra})
}

// startClusterOf starts n members as c describes (its extra flags, peer
// scheme and per-member flags).
func startClusterOf(t *testing.T, n int, c *cluster) *cluster {
	t.Helper()
	if !againstEtcd && kiteBuildErr != nil {
		t.Fatalf("kite binary: %v", kiteBuildErr)
	}
	c.t, c.token = t, fmt.Sprintf("kite-test-%x", rand.Uint64())
	if c.scheme == "" {
		c.scheme = "http"
	}
	c.newMembers(n, func(i int) string { return fmt.Sprintf("n%d", i) }, func(int) string { return "127.0.0.1" })
	if c.prepare != nil {
		for _, m := range c.members {
			c.prepare(c, m)
		}
	}
	// All first: no member serves before a quorum runs.
	for _, m := range c.members {
		if err := m.start(); err != nil {
			t.Fatalf("start member %s: %v\nlog:\n%s", m.name, err, m.log.Tail(8192))
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, m := range c.members {
		if err := m.waitServing(deadline); err != nil {
			t.Fatalf("member %s: %v\nlog:\n%s", m.name, err, m.log.Tail(8192))
		}
	}
	c.leaderIndex(t)
	return c
}

// initialCluster is the --initial-cluster value: every member's name=peer URL.
func (c *cluster) initialCluster() string {
	var parts []string
	for _, m := range c.members {
		if !m.removed {
			parts = append(parts, m.name+"="+m.peerURL)
		}
	}
	return strings.Join(parts, ",")
}

// args is the member's command line with the given cluster token.
func (m *clusterMember) args(token string) []string {
	args := append(memberArgs(m.name, m.dataDir, m.Endpoint, m.peerURL, m.c.initialCluster(), token), m.c.extra...)
	if m.c.perMember != nil {
		args = append(args, m.c.perMember(slices.Index(m.c.members, m))...)
	}
	if m.state != "" {
		args[slices.Index(args, "--initial-cluster-state")+1] = m.state
	}
	return args
}

// memberArgs is a member's command line, etcd's flags exactly as etcd takes them.
func memberArgs(name, dataDir, clientURL, peerURL, initialCluster, token string) []string {
	return []string{
		"--name", name,
		"--data-dir", dataDir,
		"--listen-client-urls", clientURL,
		"--advertise-client-urls", clientURL,
		"--listen-peer-urls", peerURL,
		"--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", initialCluster,
		"--initial-cluster-state", "new",
		"--initial-cluster-token", token,
		"--heartbeat-interval", "50",
		"--election-timeout", "500",
		"--log-level", raftLogLevel,
	}
}

// memberCommand is the command of a member process (kite, or etcd when the
// tests run against etcd) writing to out. A member dies with the test
// process (testenv.Start), so one that ends without cleanup leaves none.
func memberCommand(t testing.TB, args []string, out io.Writer) testenv.Command {
	t.Helper()
	if againstEtcd {
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		return testenv.Command{Argv: append([]string{self}, args...), Env: []string{etcdMemberEnv + "=1"}, Out: out}
	}
	if kiteBuildErr != nil {
		t.Fatalf("kite binary: %v", kiteBuildErr)
	}
	// The peer fault hooks (partition a member) are served to tests.
	return testenv.Command{Argv: append([]string{kiteBin}, args...), Env: []string{"KITE_TEST_PEER_FAULTS=1"}, Out: out}
}

// start starts the process; it does not wait for it to serve.
func (m *clusterMember) start() error { return m.startWith(m.args(m.c.token), nil) }

// startWith starts the process with exactly args and, on top of the
// test's environment, env (a member configured by ETCD_ variables).
func (m *clusterMember) startWith(args, env []string) error {
	c := memberCommand(m.t, args, m.log)
	c.Env = append(c.Env, env...)
	if m.c.wrap != nil {
		m.c.wrap(m, &c)
	}
	// A member that dies on its own is then seen in its log.
	c.NoteExit = true
	p, err := testenv.Start(c)
	if err != nil {
		return err
	}
	m.proc, m.exited = p, p.Exited()
	return m.connect(m.Endpoint)
}

// waitServing waits until the member knows a leader and answers a
// linearizable read (which needs a working quorum).
func (m *clusterMember) waitServing(deadline time.Time) error {
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-m.exited:
			return fmt.Errorf("process exited (%v) before serving (last error: %v)", m.proc.State(), last)
		default:
		}
		st, err := m.status()
		if err == nil && st.Leader == 0 {
			err = errors.New("Status reports no leader")
		}
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err = m.KV.Range(ctx, &pb.RangeRequest{Key: []byte("readiness")})
			cancel()
		}
		if err == nil {
			return nil
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("not serving in time: %v", last)
}

// status asks the member's Maintenance Status, without the client's retries.
func (m *clusterMember) status() (*pb.StatusResponse, error) {
	if !m.running() {
		return nil, fmt.Errorf("member %s is not running", m.name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return m.Maint.Status(ctx, &pb.StatusRequest{})
}

func (m *clusterMember) running() bool { return m.proc != nil }

// Kill ends the member abruptly (SIGKILL): no shutdown code runs.
func (m *clusterMember) Kill() { m.kiteProcess.stop() }

// Stop ends the member cleanly (SIGTERM) and waits for it to exit.
func (m *clusterMember) Stop() {
	m.t.Helper()
	if !m.running() {
		return
	}
	if m.Client != nil {
		m.Client.Close()
		m.Client = nil
	}
	if killed := m.proc.Stop(15 * time.Second); killed {
		m.t.Errorf("member %s still running 15 s after SIGTERM; killed", m.name)
	}
	m.proc = nil
}

// Restart starts the member again with the same command line and data dir
// and waits until it serves (the rest of the cluster must have a quorum).
func (m *clusterMember) Restart() {
	m.t.Helper()
	if m.running() {
		m.t.Fatalf("restart of member %s, which is running", m.name)
	}
	fmt.Fprintf(m.log, "\n----- restart -----\n")
	err := m.start()
	if err == nil {
		err = m.waitServing(time.Now().Add(30 * time.Second))
	}
	if err != nil {
		m.t.Fatalf("restart member %s: %v\nlog:\n%s", m.name, err, m.log.Tail(8192))
	}
}

// endpoints returns every member's client URL.
func (c *cluster) endpoints() []string {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, m.Endpoint)
	}
	return eps
}

// procs returns the members, all or those at the given indexes, as the
// fleet helpers take them.
func (c *cluster) procs(idx ...int) []*kiteProcess {
	if idx == nil {
		for i := range c.members {
			idx = append(idx, i)
		}
	}
	var ks []*kiteProcess
	for _, i := range idx {
		ks = append(ks, c.members[i].kiteProcess)
	}
	return ks
}

// others returns the indexes of every member but i.
func (c *cluster) others(i int) []int {
	var idx []int
	for j := range c.members {
		if j != i {
			idx = append(idx, j)
		}
	}
	return idx
}

// leaderIndex returns the index of the leader once every running member
// names the same leader and that leader is running (15 s at most).
func (c *cluster) leaderIndex(t *testing.T) int {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		i, err := c.agreedLeader()
		if err == nil {
			return i
		}
		if time.Now().After(deadline) {
			t.Fatalf("no leader agreed on by every running member in 15 s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *cluster) agreedLeader() (int, error) {
	var leader uint64
	idx := -1
	for i, m := range c.members {
		if !m.running() || m.removed {
			continue
		}
		st, err := m.status()
		if err != nil {
			return -1, fmt.Errorf("Status of %s: %w", m.name, err)
		}
		switch {
		case st.Leader == 0:
			return -1, fmt.Errorf("%s knows no leader", m.name)
		case leader != 0 && st.Leader != leader:
			return -1, fmt.Errorf("%s names leader %x, another member %x", m.name, st.Leader, leader)
		}
		leader = st.Leader
		if st.Header.GetMemberId() == leader {
			idx = i
		}
	}
	if idx < 0 {
		return -1, fmt.Errorf("leader %x is no running member", leader)
	}
	return idx, nil
}

// runToExit runs a member command line that must end by itself and
// returns its output and exit code; a process still running after
// timeout is killed and fails the test.
func runToExit(t *testing.T, args []string, timeout time.Duration) (string, int) {
	t.Helper()
	out := &syncBuffer{}
	p, err := testenv.Start(memberCommand(t, args, out))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Exited():
	case <-time.After(timeout):
		p.Kill()
		t.Fatalf("%v still running after %v; output:\n%s", args, timeout, out.Tail(8192))
	}
	return out.Tail(1 << 20), p.State().ExitCode()
}

// putEventually retries a put through m until it succeeds or timeout
// passes, and returns its response.
func putEventually(t *testing.T, m *clusterMember, key, value string, timeout time.Duration) *clientv3.PutResponse {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := m.Client.Put(ctx, key, value)
		cancel()
		if err == nil {
			return resp
		}
		if time.Now().After(deadline) {
			t.Fatalf("put %s through %s: still failing after %v: %v", key, m.name, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// live returns the members that are running and not removed.
func (c *cluster) live() []*clusterMember {
	var ms []*clusterMember
	for _, m := range c.members {
		if m.running() && !m.removed {
			ms = append(ms, m)
		}
	}
	return ms
}

// addMember adds a member to the running cluster through via's
// MemberAdd, as an operator does before starting it, and returns it, not
// started (startJoined starts it). etcd's quorum check refuses a voter
// until the members have been connected for 5 s: that answer is retried.
func (c *cluster) addMember(t *testing.T, via *clusterMember, learner bool) (*clusterMember, *clientv3.MemberAddResponse) {
	t.Helper()
	m := &clusterMember{c: c, name: fmt.Sprintf("n%d", len(c.members)), state: "existing"}
	m.kiteProcess = &kiteProcess{server: &server{name: m.name}, t: t, dataDir: t.TempDir(), port: freePort(t), log: &syncBuffer{}}
	m.Endpoint = "http://127.0.0.1:" + strconv.Itoa(m.port)
	m.peerURL = c.scheme + "://127.0.0.1:" + strconv.Itoa(freePort(t))
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var resp *clientv3.MemberAddResponse
		var err error
		if learner {
			resp, err = via.Client.MemberAddAsLearner(ctx, []string{m.peerURL})
		} else {
			resp, err = via.Client.MemberAdd(ctx, []string{m.peerURL})
		}
		cancel()
		if err == nil {
			c.members = append(c.members, m)
			return m, resp
		}
		if !errors.Is(err, rpctypes.ErrUnhealthy) || time.Now().After(deadline) {
			t.Fatalf("member add %s through %s: %v", m.peerURL, via.name, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// startJoined starts a member added by addMember and waits until it knows
// a leader and has published its name (every member lists it by name). A
// learner serves no linearizable read, so none is asked of it.
func (m *clusterMember) startJoined(t *testing.T) {
	t.Helper()
	if err := m.start(); err != nil {
		t.Fatalf("start member %s: %v\nlog:\n%s", m.name, err, m.log.Tail(8192))
	}
	deadline := time.Now().Add(30 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-m.exited:
			t.Fatalf("member %s exited (%v) before serving\nlog:\n%s", m.name, m.proc.State(), m.log.Tail(8192))
		default:
		}
		st, err := m.status()
		if err == nil && st.Leader == 0 {
			err = errors.New("Status reports no leader")
		}
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			var resp *clientv3.MemberListResponse
			resp, err = m.c.live()[0].Client.MemberList(ctx)
			cancel()
			if err == nil && !slices.ContainsFunc(resp.Members, func(pm *pb.Member) bool { return pm.Name == m.name }) {
				err = fmt.Errorf("member list does not name %s yet: %v", m.name, resp.Members)
			}
		}
		if err == nil {
			return
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("joined member %s not serving in time: %v\nlog:\n%s", m.name, last, m.log.Tail(8192))
}

// newMembers adds n members, not started, on free ports: member i named
// name(i), its peer URL on host peerHost(i) (clients always dial
// 127.0.0.1). They are stopped, and their logs shown if t failed, when t
// ends.
func (c *cluster) newMembers(n int, name, peerHost func(int) string) {
	t := c.t
	// A client and a peer port per member, all distinct.
	ports := freePorts(t, 2*n)
	port := func() int {
		p := ports[0]
		ports = ports[1:]
		return p
	}
	for i := range n {
		m := &clusterMember{c: c, name: name(i)}
		m.kiteProcess = &kiteProcess{server: &server{name: m.name}, t: t, dataDir: t.TempDir(), port: port(), log: &syncBuffer{}}
		m.Endpoint = "http://127.0.0.1:" + strconv.Itoa(m.port)
		m.peerURL = c.scheme + "://" + peerHost(i) + ":" + strconv.Itoa(port())
		c.members = append(c.members, m)
	}
	t.Cleanup(func() {
		for _, m := range c.members {
			m.kiteProcess.stop()
			if t.Failed() {
				t.Logf("member %s log (tail):\n%s", m.name, m.log.Tail(8192))
			}
		}
	})
}
