package test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// raftsql clusters whose members know each other by name, as a
// StatefulSet's pods do (kite-0.kite, kite-1.kite, ...): every name is
// served by the test's own DNS server (dnsserver_test.go), which kite
// uses through KITE_TEST_DNS_SERVER, so these tests are kite-only.

// namesDomain is the domain of the members' names; every name resolves
// to 127.0.0.1, the members are told apart by their ports.
const namesDomain = "kite.test"

// namedCluster is a cluster of n members named kite-0..kite-<n-1>, with
// their ports chosen and nothing started.
func namedCluster(t *testing.T, n int) *cluster {
	t.Helper()
	if againstEtcd {
		t.Skip("kite-only: etcd refuses host names in listen URLs and has no KITE_TEST_DNS_SERVER")
	}
	if kiteBuildErr != nil {
		t.Fatalf("kite binary: %v", kiteBuildErr)
	}
	c := &cluster{t: t, token: fmt.Sprintf("kite-test-%x", rand.Uint64()), scheme: "http"}
	// The test itself dials addresses: only kite uses the test's DNS.
	c.newMembers(n, func(i int) string { return fmt.Sprintf("kite-%d", i) }, memberHost)
	return c
}

// memberHost is member i's DNS name.
func memberHost(i int) string { return fmt.Sprintf("kite-%d.%s", i, namesDomain) }

// hostURL is u with its host replaced by host (the port kept).
func hostURL(u, host string) string {
	scheme, rest, _ := strings.Cut(u, "://")
	_, port, _ := strings.Cut(rest, ":")
	return scheme + "://" + host + ":" + port
}

// waitLog waits until m's output holds text.
func waitLog(t *testing.T, m *clusterMember, text string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(m.log.Tail(1<<20), text) {
		if time.Now().After(deadline) {
			t.Fatalf("member %s did not log %q within %v; log:\n%s", m.name, text, timeout, m.log.Tail(8192))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitClusterServing waits until every member serves and all agree on a
// leader.
func waitClusterServing(t *testing.T, c *cluster, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for _, m := range c.members {
		if err := m.waitServing(deadline); err != nil {
			t.Fatalf("member %s: %v\nlog:\n%s", m.name, err, m.log.Tail(8192))
		}
	}
	c.leaderIndex(t)
}

// checkReplicates writes a key through every member and reads every key
// back from every member, linearizably and from its own state.
func checkReplicates(t *testing.T, c *cluster) {
	t.Helper()
	var keys []string
	for i, m := range c.members {
		key := fmt.Sprintf("names/%d", i)
		putEventually(t, m, key, m.name, 15*time.Second)
		keys = append(keys, key)
	}
	for _, m := range c.members {
		for i, key := range keys {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			resp, err := m.Client.Get(ctx, key)
			cancel()
			if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != c.members[i].name {
				t.Fatalf("linearizable get %s from %s: %v %v", key, m.name, resp, err)
			}
		}
		last := keys[len(keys)-1]
		deadline := time.Now().Add(10 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			resp, err := m.Client.Get(ctx, last, clientv3.WithSerializable())
			cancel()
			if err == nil && len(resp.Kvs) == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("serializable get %s from %s: %v %v", last, m.name, resp, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// checkMembers checks that every member lists the same members (IDs and
// peer URLs, as peerURLs gives them by name), knows itself by its name,
// and reports the same cluster ID.
func checkMembers(t *testing.T, c *cluster, peerURLs map[string]string) {
	t.Helper()
	var clusterID uint64
	var ids []uint64
	for _, m := range c.members {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := m.Client.MemberList(ctx)
		cancel()
		if err != nil {
			t.Fatalf("member list from %s: %v", m.name, err)
		}
		if clusterID == 0 {
			clusterID = resp.Header.ClusterId
		} else if resp.Header.ClusterId != clusterID {
			t.Fatalf("%s reports cluster %x, another member %x", m.name, resp.Header.ClusterId, clusterID)
		}
		var got []uint64
		var urls []string
		for _, mm := range resp.Members {
			got = append(got, mm.ID)
			urls = append(urls, mm.PeerURLs...)
			if mm.ID == resp.Header.MemberId && mm.Name != m.name {
				t.Errorf("%s lists itself as %q", m.name, mm.Name)
			}
		}
		slices.Sort(got)
		if ids == nil {
			ids = got
		} else if !slices.Equal(ids, got) {
			t.Fatalf("%s lists members %x, another member %x", m.name, got, ids)
		}
		var want []string
		for _, u := range peerURLs {
			want = append(want, u)
		}
		slices.Sort(want)
		slices.Sort(urls)
		if !slices.Equal(urls, want) {
			t.Fatalf("%s lists peer URLs %v, want %v", m.name, urls, want)
		}
	}
}

// TestRaftNamesFromEnv bootstraps a 3-member cluster configured only
// through etcd's ETCD_ variables, every URL a host name (a client URL
// "localhost"), one member advertising its peer URL by address where
// --initial-cluster names it (etcd resolves both to compare them), and
// one member's name published in DNS only seconds after that member
// started: it waits for its name, then joins, and the cluster serves
// writes and reads through every member.
func TestRaftNamesFromEnv(t *testing.T) {
	dns := startTestDNS(t)
	c := namedCluster(t, 3)
	const late = 2
	for i := range c.members {
		if i != late {
			dns.SetHost(memberHost(i), "127.0.0.1")
		}
	}
	var initial []string
	for _, m := range c.members {
		initial = append(initial, m.name+"="+m.peerURL)
	}
	envs := make([][]string, len(c.members))
	for i, m := range c.members {
		clientListen := hostURL(m.Endpoint, memberHost(i))
		advertisePeer := m.peerURL
		switch i {
		case 0:
			clientListen = hostURL(m.Endpoint, "localhost")
		case 1:
			advertisePeer = hostURL(m.peerURL, "127.0.0.1")
		}
		env := []string{
			dns.Env(),
			"ETCD_NAME=" + m.name,
			"ETCD_DATA_DIR=" + m.dataDir,
			"ETCD_LISTEN_CLIENT_URLS=" + clientListen,
			"ETCD_ADVERTISE_CLIENT_URLS=" + hostURL(m.Endpoint, memberHost(i)),
			"ETCD_LISTEN_PEER_URLS=" + m.peerURL,
			"ETCD_INITIAL_ADVERTISE_PEER_URLS=" + advertisePeer,
			"ETCD_INITIAL_CLUSTER=" + strings.Join(initial, ","),
			"ETCD_INITIAL_CLUSTER_STATE=new",
			"ETCD_INITIAL_CLUSTER_TOKEN=" + c.token,
			"ETCD_HEARTBEAT_INTERVAL=50",
			"ETCD_ELECTION_TIMEOUT=500",
			"ETCD_LOG_LEVEL=" + raftLogLevel,
		}
		envs[i] = env
		if err := m.startWith(nil, env); err != nil {
			t.Fatalf("start member %s: %v", m.name, err)
		}
	}
	lateMember := c.members[late]
	waitLog(t, lateMember, "waiting for DNS name "+memberHost(late)+" to resolve", 15*time.Second)
	time.Sleep(3 * time.Second)
	select {
	case <-lateMember.exited:
		t.Fatalf("member %s gave up waiting for its name:\n%s", lateMember.name, lateMember.log.Tail(8192))
	default:
	}
	dns.SetHost(memberHost(late), "127.0.0.1")

	waitClusterServing(t, c, 30*time.Second)
	for _, line := range strings.Split(lateMember.log.Tail(1<<20), "\n") {
		if strings.Contains(line, "DNS name") {
			t.Logf("%s: %s", lateMember.name, line)
		}
	}
	checkReplicates(t, c)
	// Member IDs come from the --initial-cluster strings, as etcd's: the
	// member that advertised an address is listed by its name.
	checkMembers(t, c, map[string]string{
		"kite-0": c.members[0].peerURL, "kite-1": c.members[1].peerURL, "kite-2": c.members[2].peerURL})

	// A restarted pod gets its record again some seconds after it starts:
	// the member restarted from its WAL waits for its name as well, then
	// catches up.
	lateMember.Kill()
	dns.SetHost(memberHost(late))
	putEventually(t, c.members[0], "names/while-down", "x", 15*time.Second)
	fmt.Fprintf(lateMember.log, "\n----- restart -----\n")
	if err := lateMember.startWith(nil, envs[late]); err != nil {
		t.Fatalf("restart member %s: %v", lateMember.name, err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, after, _ := strings.Cut(lateMember.log.Tail(1<<20), "----- restart -----")
		if strings.Contains(after, "waiting for DNS name "+memberHost(late)+" to resolve") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("restarted member %s did not wait for its name; log:\n%s", lateMember.name, lateMember.log.Tail(8192))
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second)
	dns.SetHost(memberHost(late), "127.0.0.1")
	if err := lateMember.waitServing(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatalf("restarted member %s: %v\nlog:\n%s", lateMember.name, err, lateMember.log.Tail(8192))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if resp, err := lateMember.Client.Get(ctx, "names/while-down"); err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("restarted member %s misses the write made while it was down: %v %v", lateMember.name, resp, err)
	}
}

// TestRaftNamesDiscoverySRV bootstraps a 3-member cluster from DNS SRV
// records (--discovery-srv, --discovery-srv-name): each member finds
// itself among the records by its advertised peer URL, all three agree on
// the members and the cluster ID, and the cluster serves.
func TestRaftNamesDiscoverySRV(t *testing.T) {
	dns := startTestDNS(t)
	c := namedCluster(t, 3)
	var records []srvRecord
	want := map[string]string{}
	for i, m := range c.members {
		dns.SetHost(memberHost(i), "127.0.0.1")
		_, port, _ := strings.Cut(strings.TrimPrefix(m.peerURL, "http://"), ":")
		p, _ := strconv.Atoi(port)
		records = append(records, srvRecord{Target: memberHost(i), Port: uint16(p)})
		want[m.name] = m.peerURL
	}
	// With --discovery-srv-name only the suffixed service counts: the
	// plain one names a member that does not exist.
	dns.SetSRV("_etcd-server-kite._tcp."+namesDomain, records...)
	dns.SetSRV("_etcd-server._tcp."+namesDomain, srvRecord{Target: "ghost." + namesDomain, Port: 1})
	dns.SetHost("ghost."+namesDomain, "127.0.0.1")

	for _, m := range c.members {
		args := []string{
			"--name", m.name,
			"--data-dir", m.dataDir,
			"--listen-client-urls", m.Endpoint,
			"--advertise-client-urls", m.Endpoint,
			"--listen-peer-urls", m.peerURL,
			"--initial-advertise-peer-urls", m.peerURL,
			"--discovery-srv", namesDomain,
			"--discovery-srv-name", "kite",
			"--initial-cluster-state", "new",
			"--initial-cluster-token", c.token,
			"--heartbeat-interval", "50",
			"--election-timeout", "500",
			"--log-level", raftLogLevel,
		}
		if err := m.startWith(args, []string{dns.Env()}); err != nil {
			t.Fatalf("start member %s: %v", m.name, err)
		}
	}
	waitClusterServing(t, c, 30*time.Second)
	for _, line := range strings.Split(c.members[0].log.Tail(1<<20), "\n") {
		if strings.Contains(line, "msg=\"get cluster for") || strings.Contains(line, "from DNS") {
			t.Logf("%s: %s", c.members[0].name, line)
		}
	}
	checkReplicates(t, c)
	checkMembers(t, c, want)

	// etcd refuses two ways of bootstrapping at once.
	out, code := runToExit(t, []string{"--name", "x", "--data-dir", t.TempDir(),
		"--discovery-srv", namesDomain, "--initial-cluster", "x=http://127.0.0.1:2380"}, 10*time.Second)
	if code == 0 || !strings.Contains(out, "multiple discovery or bootstrap flags are set") {
		t.Fatalf("--discovery-srv with --initial-cluster: exit %d, output:\n%s", code, out)
	}
}
