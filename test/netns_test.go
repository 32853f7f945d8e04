package test

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kite-db/kite/internal/testenv"
)

// A network of the test's own for real partitions: each member in a
// network namespace of its own, its one interface a veth on a bridge the
// test creates in the root namespace. The bridge holds the host's address in
// the same /24, so the test's clients reach every member from the root
// namespace while the members talk to each other across the bridge, and
// links are cut by nftables drop rules inside a member's namespace (the
// kernel has no netem; downing a link could not drop one way only).
// Nothing leaves the machine: the subnet is a 10.213.x.0/24 no interface
// here has, with no route beyond the bridge.

// nsTable is the nftables table each namespace gets; cuts are rules in its
// chains, and healing flushes them.
const nsTable = "kite_partition"

// netnsNet is the bridge and the namespaces of one test.
type netnsNet struct {
	ns     []string // namespace of member i
	ips    []string // address of member i
	veths  []string // root side of member i's link
	host   string   // the root namespace's address on the bridge
	ipPath string
}

// newNetnsNet creates n namespaces on a new bridge, every name unique to this
// run, all removed when t ends, failed or not. It needs root, ip and nft:
// without them the test is skipped, except under CI=true, where it fails.
func newNetnsNet(t *testing.T, n int) *netnsNet {
	t.Helper()
	unavailable := func(msg string) {
		t.Helper()
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	if os.Geteuid() != 0 {
		unavailable("network namespaces need root")
	}
	ipPath, err := exec.LookPath("ip")
	if err != nil {
		unavailable(fmt.Sprintf("network namespaces need ip (iproute2): %v", err))
	}
	if _, err := exec.LookPath("nft"); err != nil {
		unavailable(fmt.Sprintf("partitions need nft (nftables): %v", err))
	}
	subnet, err := freeSubnet()
	if err != nil {
		t.Fatal(err)
	}
	// Interface names have at most 15 bytes: a short random tag, which
	// also keeps tests of other processes on this machine apart.
	tag := fmt.Sprintf("%06x", rand.Uint32()&0xffffff)
	bridge := "kpb" + tag
	nw := &netnsNet{ipPath: ipPath, host: subnet + ".1"}
	// Registered first, so it runs even when the setup fails half-way.
	// The veths go first: a deleted namespace lingers in the kernel, its
	// end of the veth with it, long after the test.
	t.Cleanup(func() {
		for _, veth := range nw.veths {
			if err := nsRun("ip", "link", "delete", veth); err != nil {
				t.Errorf("remove veth: %v", err)
			}
		}
		for _, ns := range nw.ns {
			if err := nsRun("ip", "netns", "delete", ns); err != nil {
				t.Errorf("remove namespace: %v", err)
			}
		}
		if err := nsRun("ip", "link", "delete", bridge); err != nil {
			t.Errorf("remove bridge: %v", err)
		}
	})
	setup := [][]string{
		{"ip", "link", "add", bridge, "type", "bridge"},
		{"ip", "addr", "add", nw.host + "/24", "dev", bridge},
		{"ip", "link", "set", bridge, "up"},
	}
	if err := nsRun(setup[0]...); err != nil {
		unavailable(fmt.Sprintf("create a bridge: %v", err))
	}
	for _, cmd := range setup[1:] {
		if err := nsRun(cmd...); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		ns := fmt.Sprintf("kitepart-%s-%d", tag, i)
		ip := subnet + "." + strconv.Itoa(11+i)
		veth := fmt.Sprintf("kpv%s%d", tag, i)
		if err := nsRun("ip", "netns", "add", ns); err != nil {
			t.Fatal(err)
		}
		nw.ns, nw.ips = append(nw.ns, ns), append(nw.ips, ip)
		if err := nsRun("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns); err != nil {
			t.Fatal(err)
		}
		nw.veths = append(nw.veths, veth)
		for _, cmd := range [][]string{
			{"ip", "link", "set", veth, "master", bridge, "up"},
			{"ip", "-n", ns, "link", "set", "lo", "up"},
			{"ip", "-n", ns, "addr", "add", ip + "/24", "dev", "eth0"},
			{"ip", "-n", ns, "link", "set", "eth0", "up"},
		} {
			if err := nsRun(cmd...); err != nil {
				t.Fatal(err)
			}
		}
		script := fmt.Sprintf("table inet %[1]s {\n chain input { type filter hook input priority 0; policy accept; }\n"+
			" chain output { type filter hook output priority 0; policy accept; }\n}\n", nsTable)
		if err := nw.nft(i, script); err != nil {
			t.Fatal(err)
		}
	}
	return nw
}

// freeSubnet returns the first three octets of a 10.213.x.0/24 no local
// interface has an address in (another test's bridge would).
func freeSubnet() (string, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return "", fmt.Errorf("local addresses: %w", err)
	}
	for range 50 {
		subnet := fmt.Sprintf("10.213.%d", 1+rand.IntN(254))
		if !slices.ContainsFunc(addrs, func(a net.Addr) bool { return strings.HasPrefix(a.String(), subnet+".") }) {
			return subnet, nil
		}
	}
	return "", fmt.Errorf("no free 10.213.x.0/24 among %v", addrs)
}

func nsRun(argv ...string) error {
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, out)
	}
	return nil
}

// nft runs an nft script in member i's namespace.
func (nw *netnsNet) nft(i int, script string) error {
	cmd := exec.Command("ip", "netns", "exec", nw.ns[i], "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft in %s: %w: %s\nscript:\n%s", nw.ns[i], err, out, script)
	}
	return nil
}

// cluster is a cluster of n members, member i in namespace i, listening for
// clients and peers on its namespace's address only.
func (nw *netnsNet) cluster(t *testing.T, extra ...string) *cluster {
	t.Helper()
	return startClusterOf(t, len(nw.ns), &cluster{
		extra: extra,
		prepare: func(c *cluster, m *clusterMember) {
			i := slices.Index(c.members, m)
			// The ports were chosen free on the root namespace's
			// loopback; in a namespace of its own every port is free.
			_, cport, _ := strings.Cut(strings.TrimPrefix(m.Endpoint, "http://"), ":")
			_, pport, _ := strings.Cut(strings.TrimPrefix(m.peerURL, c.scheme+"://"), ":")
			m.Endpoint = "http://" + nw.ips[i] + ":" + cport
			m.peerURL = c.scheme + "://" + nw.ips[i] + ":" + pport
		},
		wrap: func(m *clusterMember, cmd *testenv.Command) { nw.inNamespace(slices.Index(m.c.members, m))(cmd) },
	})
}

// inNamespace makes a command run in namespace i. ip execs it in place (no
// fork): the PID the test waits for and signals is the server's, and
// Pdeathsig still holds.
func (nw *netnsNet) inNamespace(i int) func(*testenv.Command) {
	return func(cmd *testenv.Command) {
		cmd.Argv = append([]string{nw.ipPath, "netns", "exec", nw.ns[i]}, cmd.Argv...)
	}
}

// drop makes member at's namespace drop packets in chain ("input" or
// "output") from (input) or to (output) each member of peers.
func (nw *netnsNet) drop(t *testing.T, at int, chain string, peers ...int) {
	t.Helper()
	field := map[string]string{"input": "saddr", "output": "daddr"}[chain]
	if field == "" {
		t.Fatalf("chain %q: want input or output", chain)
	}
	var b strings.Builder
	for _, p := range peers {
		fmt.Fprintf(&b, "add rule inet %s %s ip %s %s drop\n", nsTable, chain, field, nw.ips[p])
	}
	if err := nw.nft(at, b.String()); err != nil {
		t.Fatal(err)
	}
}

// cutFrom drops every packet from member from at member to, where it
// arrives: from's own stack sees no error, as on a link that loses them.
func (nw *netnsNet) cutFrom(t *testing.T, from, to int) {
	t.Helper()
	nw.drop(t, to, "input", from)
}

// healAll removes every cut.
func (nw *netnsNet) healAll(t *testing.T) {
	t.Helper()
	for i := range nw.ns {
		if err := nw.nft(i, fmt.Sprintf("flush table inet %s\n", nsTable)); err != nil {
			t.Fatal(err)
		}
	}
}
