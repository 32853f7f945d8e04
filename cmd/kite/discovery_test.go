package main

import (
	"context"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"
	"time"
)

// fakeDNS answers SRV and address lookups from maps, as a DNS server with
// those records would (unknown names are not found).
type fakeDNS struct {
	srv   map[string][]*net.SRV // _service._proto.domain
	hosts map[string][]string   // name without the final dot -> addresses
}

func (d fakeDNS) LookupSRV(_ context.Context, service, proto, name string) (string, []*net.SRV, error) {
	key := "_" + service + "._" + proto + "." + name
	recs, ok := d.srv[key]
	if !ok {
		return "", nil, &net.DNSError{Err: "no such host", Name: key, IsNotFound: true}
	}
	return key + ".", recs, nil
}

func (d fakeDNS) LookupIPAddr(_ context.Context, host string) ([]net.IPAddr, error) {
	addrs, ok := d.hosts[strings.TrimSuffix(host, ".")]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	var out []net.IPAddr
	for _, a := range addrs {
		out = append(out, net.IPAddr{IP: net.ParseIP(a)})
	}
	return out, nil
}

func srv(target string, port uint16) *net.SRV { return &net.SRV{Target: target, Port: port} }

// members is the cluster as "name=url" strings, sorted, for comparison.
func members(c map[string][]string) []string {
	var out []string
	for name, urls := range c {
		for _, u := range urls {
			out = append(out, name+"="+u)
		}
	}
	slices.Sort(out)
	return out
}

func discoveryDNS() fakeDNS {
	return fakeDNS{
		srv: map[string][]*net.SRV{},
		hosts: map[string][]string{
			"kite-0.kite.test": {"10.0.0.10"},
			"kite-1.kite.test": {"10.0.0.11"},
			"kite-2.kite.test": {"10.0.0.12"},
		},
	}
}

func TestDiscoverClusterPlain(t *testing.T) {
	dns := discoveryDNS()
	dns.srv["_etcd-server._tcp.kite.test"] = []*net.SRV{
		srv("kite-0.kite.test.", 2380), srv("kite-1.kite.test.", 2380), srv("kite-2.kite.test.", 2380)}
	// This member advertises its address: the record whose target
	// resolves to it is this member's.
	c, err := discoverCluster(context.Background(), dns, slog.New(slog.DiscardHandler), "kite-1", "kite.test", "",
		[]string{"http://10.0.0.11:2380"})
	if err != nil {
		t.Fatal(err)
	}
	// etcd's srv.GetCluster: this member by --name, the others "0", "1"
	// in record order; URLs the targets without their final dot.
	want := []string{"0=http://kite-0.kite.test:2380", "1=http://kite-2.kite.test:2380", "kite-1=http://kite-1.kite.test:2380"}
	if got := members(c); !slices.Equal(got, want) {
		t.Fatalf("cluster %v, want %v", got, want)
	}
}

func TestDiscoverClusterSSLAndPlain(t *testing.T) {
	dns := discoveryDNS()
	dns.srv["_etcd-server-ssl._tcp.kite.test"] = []*net.SRV{srv("kite-0.kite.test.", 2380), srv("kite-1.kite.test.", 2380)}
	dns.srv["_etcd-server._tcp.kite.test"] = []*net.SRV{srv("kite-2.kite.test.", 2380)}
	c, err := discoverCluster(context.Background(), dns, slog.New(slog.DiscardHandler), "kite-0", "kite.test", "",
		[]string{"https://kite-0.kite.test:2380"})
	if err != nil {
		t.Fatal(err)
	}
	// The names count per service, as in etcd.
	want := []string{"0=http://kite-2.kite.test:2380", "0=https://kite-1.kite.test:2380", "kite-0=https://kite-0.kite.test:2380"}
	if got := members(c); !slices.Equal(got, want) {
		t.Fatalf("cluster %v, want %v", got, want)
	}
}

func TestDiscoverClusterServiceName(t *testing.T) {
	dns := discoveryDNS()
	dns.srv["_etcd-server-kite._tcp.kite.test"] = []*net.SRV{srv("kite-0.kite.test.", 2380), srv("kite-1.kite.test.", 2380)}
	dns.srv["_etcd-server._tcp.kite.test"] = []*net.SRV{srv("kite-2.kite.test.", 2380)}
	dns.srv["_etcd-server-ssl-kite._tcp.kite.test"] = []*net.SRV{srv("kite-2.kite.test.", 2443)}
	c, err := discoverCluster(context.Background(), dns, slog.New(slog.DiscardHandler), "kite-0", "kite.test", "kite",
		[]string{"http://kite-0.kite.test:2380"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"0=https://kite-2.kite.test:2443", "0=http://kite-1.kite.test:2380", "kite-0=http://kite-0.kite.test:2380"}
	slices.Sort(want)
	if got := members(c); !slices.Equal(got, want) {
		t.Fatalf("cluster %v, want %v", got, want)
	}
}

// TestDiscoverClusterOwnMatch: this member is the record with its address
// and its port; a record on the same host with another port is another
// member; a target that does not resolve is left out, as etcd does.
func TestDiscoverClusterOwnMatch(t *testing.T) {
	dns := discoveryDNS()
	dns.hosts["alias.kite.test"] = []string{"10.0.0.99", "10.0.0.10"}
	dns.srv["_etcd-server._tcp.kite.test"] = []*net.SRV{
		srv("kite-0.kite.test.", 12380), srv("alias.kite.test.", 2380), srv("unpublished.kite.test.", 2380)}
	c, err := discoverCluster(context.Background(), dns, slog.New(slog.DiscardHandler), "me", "kite.test", "",
		[]string{"http://kite-0.kite.test:2380"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"0=http://kite-0.kite.test:12380", "me=http://alias.kite.test:2380"}
	if got := members(c); !slices.Equal(got, want) {
		t.Fatalf("cluster %v, want %v", got, want)
	}
}

func TestDiscoverClusterErrors(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	dns := discoveryDNS()
	for _, tc := range []struct {
		name      string
		records   map[string][]*net.SRV
		advertise string
		want      string
	}{
		{"no records", nil, "http://kite-0.kite.test:2380", "error querying DNS SRV records for _etcd-server"},
		{"not among the records",
			map[string][]*net.SRV{"_etcd-server._tcp.kite.test": {srv("kite-1.kite.test.", 2380)}},
			"http://kite-0.kite.test:2380", `cannot find local etcd member "kite-0" in SRV records`},
		// An https peer is not an http record's member (etcd skips it).
		{"scheme mismatch",
			map[string][]*net.SRV{"_etcd-server._tcp.kite.test": {srv("kite-0.kite.test.", 2380), srv("kite-1.kite.test.", 2380)}},
			"https://kite-0.kite.test:2380", `cannot find local etcd member "kite-0" in SRV records`},
		{"only the scheme mismatch",
			map[string][]*net.SRV{"_etcd-server._tcp.kite.test": {srv("kite-0.kite.test.", 2380)}},
			"https://kite-0.kite.test:2380", "has scheme mismatch with expected peer https://kite-0.kite.test:2380"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dns.srv = tc.records
			_, err := discoverCluster(context.Background(), dns, log, "kite-0", "kite.test", "", []string{tc.advertise})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

// TestDiscoverClusterWaitsForOwnName: a member whose own name is not
// published yet waits for it (bounded by the context here).
func TestDiscoverClusterWaitsForOwnName(t *testing.T) {
	dns := discoveryDNS()
	dns.srv["_etcd-server._tcp.kite.test"] = []*net.SRV{srv("kite-0.kite.test.", 2380)}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := discoverCluster(ctx, dns, slog.New(slog.DiscardHandler), "kite-9", "kite.test", "",
		[]string{"http://kite-9.kite.test:2380"})
	if err == nil || !strings.Contains(err.Error(), "kite-9.kite.test") || time.Since(start) < 250*time.Millisecond {
		t.Fatalf("after %v: %v", time.Since(start), err)
	}
}

// TestDiscoveryFlags: etcd's refusal of two bootstraps, from flags or its
// environment variables; --discovery-srv selects raftsql with the cluster
// left to DNS.
func TestDiscoveryFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"flags", []string{"--discovery-srv", "kite.test", "--initial-cluster", "a=http://127.0.0.1:2380"}, nil, conflictBootstrapFlags},
		{"env", nil, map[string]string{"ETCD_DISCOVERY_SRV": "kite.test", "ETCD_INITIAL_CLUSTER": "a=http://127.0.0.1:2380"}, conflictBootstrapFlags},
		{"flag and env", []string{"--initial-cluster", "a=http://127.0.0.1:2380"}, map[string]string{"KITE_DISCOVERY_SRV": "kite.test"}, conflictBootstrapFlags},
		{"name alone", []string{"--discovery-srv-name", "kite"}, nil, "--discovery-srv-name needs --discovery-srv"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseServeFlags(tc.args, env(tc.env))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}

	f, err := parseServeFlags([]string{"--name", "kite-0"}, env(map[string]string{
		"ETCD_DISCOVERY_SRV":               "kite.test",
		"ETCD_DISCOVERY_SRV_NAME":          "kite",
		"ETCD_INITIAL_ADVERTISE_PEER_URLS": "https://kite-0.kite.test:2380",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if f.raft == nil || len(f.raft.InitialCluster) != 0 || f.discoverySRV != "kite.test" || f.discoverySRVName != "kite" {
		t.Fatalf("--discovery-srv: raft %+v, srv %q %q", f.raft, f.discoverySRV, f.discoverySRVName)
	}
	dns := discoveryDNS()
	dns.srv["_etcd-server-ssl-kite._tcp.kite.test"] = []*net.SRV{srv("kite-0.kite.test.", 2380), srv("kite-1.kite.test.", 2380)}
	if err := f.discover(context.Background(), dns, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	if got := members(f.raft.InitialCluster); !slices.Equal(got, []string{"0=https://kite-1.kite.test:2380", "kite-0=https://kite-0.kite.test:2380"}) {
		t.Fatalf("initial cluster %v", got)
	}
	// https peers without a CA file: certificates are checked against the
	// domain, as etcd sets PeerTLSInfo.ServerName.
	if f.raft.PeerTLS.Info.ServerName != "kite.test" {
		t.Fatalf("peer TLS server name %q, want the domain", f.raft.PeerTLS.Info.ServerName)
	}
}
