package raftsql

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeHosts resolves names from a map; a name in late resolves only from
// its n-th lookup on, as a record published after the member started.
type fakeHosts struct {
	mu      sync.Mutex
	hosts   map[string][]string
	late    map[string]int
	lookups map[string]int
}

func (f *fakeHosts) LookupIPAddr(_ context.Context, host string) ([]net.IPAddr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lookups == nil {
		f.lookups = map[string]int{}
	}
	f.lookups[host]++
	addrs, ok := f.hosts[host]
	if !ok || f.lookups[host] < f.late[host] {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	var out []net.IPAddr
	for _, a := range addrs {
		out = append(out, net.IPAddr{IP: net.ParseIP(a)})
	}
	return out, nil
}

func (f *fakeHosts) count(host string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lookups[host]
}

func testHosts() *fakeHosts {
	return &fakeHosts{hosts: map[string][]string{
		"kite-0.kite":  {"10.0.0.10"},
		"kite-1.kite":  {"10.0.0.11"},
		"alias.kite":   {"10.0.0.99", "10.0.0.10"},
		"v6.kite":      {"fd00::10"},
		"twohomes.kit": {"10.0.0.11", "10.0.0.12"},
	}}
}

func TestSameURLs(t *testing.T) {
	for _, tc := range []struct {
		a, b []string
		want bool
	}{
		{[]string{"http://kite-0.kite:2380"}, []string{"http://kite-0.kite:2380"}, true},
		{[]string{"http://kite-0.kite:2380", "http://10.0.0.10:2381"}, []string{"http://10.0.0.10:2381", "http://kite-0.kite:2380"}, true},
		// etcd's comparison after resolving: a name and its address, two
		// names sharing an address.
		{[]string{"http://kite-0.kite:2380"}, []string{"http://10.0.0.10:2380"}, true},
		{[]string{"http://KITE-0.kite:2380/"}, []string{"http://alias.kite:2380"}, true},
		{[]string{"http://[fd00::10]:2380"}, []string{"http://v6.kite:2380"}, true},
		{[]string{"http://kite-0.kite:2380", "http://twohomes.kit:2380"}, []string{"http://10.0.0.12:2380", "http://10.0.0.10:2380"}, true},
		{[]string{"http://kite-0.kite:2380"}, []string{"http://kite-1.kite:2380"}, false},
		{[]string{"http://kite-0.kite:2380"}, []string{"http://10.0.0.10:2381"}, false},
		{[]string{"http://kite-0.kite:2380"}, []string{"https://10.0.0.10:2380"}, false},
		{[]string{"http://kite-0.kite:2380"}, []string{"http://kite-0.kite:2380", "http://kite-1.kite:2380"}, false},
		// "localhost" is compared by name, as etcd does.
		{[]string{"http://localhost:2380"}, []string{"http://localhost:2380"}, true},
		{[]string{"http://localhost:2380"}, []string{"http://127.0.0.1:2380"}, false},
	} {
		ok, err := Resolver{Lookup: testHosts()}.SameURLs(context.Background(), tc.a, tc.b)
		if err != nil || ok != tc.want {
			t.Errorf("SameURLs(%v, %v) = %v, %v; want %v", tc.a, tc.b, ok, err, tc.want)
		}
	}
}

// TestSameURLsNoLookupWhenEqual: URLs equal as written need no DNS.
func TestSameURLsNoLookupWhenEqual(t *testing.T) {
	h := &fakeHosts{}
	ok, err := Resolver{Lookup: h}.SameURLs(context.Background(), []string{"http://unpublished.kite:2380"}, []string{"http://unpublished.kite:2380"})
	if !ok || err != nil || h.count("unpublished.kite") != 0 {
		t.Fatalf("got %v, %v after %d lookups", ok, err, h.count("unpublished.kite"))
	}
}

// TestResolverWaitsForName: a name published late is retried with a log
// line that says what is awaited, then resolves.
func TestResolverWaitsForName(t *testing.T) {
	h := testHosts()
	h.late = map[string]int{"kite-1.kite": 3}
	var logs bytes.Buffer
	r := Resolver{Lookup: h, Log: slog.New(slog.NewTextHandler(&logs, nil)), Backoff: 10 * time.Millisecond}
	ok, err := r.SameURLs(context.Background(), []string{"http://kite-1.kite:2380"}, []string{"http://10.0.0.11:2380"})
	if !ok || err != nil {
		t.Fatalf("got %v, %v", ok, err)
	}
	if n := h.count("kite-1.kite"); n != 3 {
		t.Errorf("%d lookups, want 3", n)
	}
	if got := strings.Count(logs.String(), "waiting for DNS name kite-1.kite to resolve"); got != 2 {
		t.Errorf("%d waiting lines, want 2:\n%s", got, logs.String())
	}
	if !strings.Contains(logs.String(), "DNS name resolved") {
		t.Errorf("no line saying the name resolved:\n%s", logs.String())
	}
}

// TestResolverGivesUp: a name that never resolves fails after the bound,
// with the name and the lookup error.
func TestResolverGivesUp(t *testing.T) {
	h := testHosts()
	r := Resolver{Lookup: h, Wait: 200 * time.Millisecond, Backoff: 20 * time.Millisecond}
	start := time.Now()
	ok, err := r.SameURLs(context.Background(), []string{"http://kite-9.kite:2380"}, []string{"http://10.0.0.19:2380"})
	var dnsErr *net.DNSError
	if ok || err == nil || !strings.Contains(err.Error(), "DNS name kite-9.kite did not resolve") || !errors.As(err, &dnsErr) {
		t.Fatalf("got %v, %v", ok, err)
	}
	if d := time.Since(start); d > 2*time.Second || h.count("kite-9.kite") < 3 {
		t.Fatalf("gave up after %v and %d lookups", d, h.count("kite-9.kite"))
	}

	// A cancelled context ends the wait at once.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := (Resolver{Lookup: h}).LookupHost(ctx, "kite-9.kite"); err == nil {
		t.Fatal("resolved under a cancelled context")
	}
}

func TestWaitForURLs(t *testing.T) {
	h := testHosts()
	h.late = map[string]int{"kite-0.kite": 2}
	r := Resolver{Lookup: h, Backoff: 10 * time.Millisecond}
	urls := []string{"http://kite-0.kite:2379", "http://127.0.0.1:2379", "unix:///tmp/kite.sock", "https://[::1]:2379", "http://0.0.0.0:2379"}
	if err := r.WaitForURLs(context.Background(), urls); err != nil {
		t.Fatal(err)
	}
	if h.count("kite-0.kite") != 2 || len(h.lookups) != 1 {
		t.Fatalf("lookups %v: only the name is looked up, until it resolves", h.lookups)
	}
	r.Wait = 50 * time.Millisecond
	if err := r.WaitForURLs(context.Background(), []string{"http://nowhere.kite:2379"}); err == nil || !strings.Contains(err.Error(), "http://nowhere.kite:2379") {
		t.Fatalf("unresolvable listen URL: %v", err)
	}
}

// TestValidateResolvesAdvertise: the bootstrap accepts an advertise URL
// spelled as the address of the name --initial-cluster gives (etcd does),
// and refuses one that resolves elsewhere with etcd's message.
func TestValidateResolvesAdvertise(t *testing.T) {
	c := Config{Name: "a", InitialCluster: map[string][]string{"a": {"http://localhost:2380"}, "b": {"http://127.0.0.1:2381"}},
		AdvertisePeer: []string{"http://localhost:2380"}}
	c.setDefaults()
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
	c.AdvertisePeer = []string{"http://127.0.0.1:2390"}
	if err := c.validate(); err == nil || !strings.Contains(err.Error(), "--initial-cluster has a=http://localhost:2380 but missing from --initial-advertise-peer-urls=http://127.0.0.1:2390") {
		t.Fatalf("mismatch: %v", err)
	}
}
