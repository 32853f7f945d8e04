package raftsql

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Members are often named by host name rather than address: a
// StatefulSet's pods are kite-0.kite, kite-1.kite, ..., their addresses
// change at every restart, and a pod's DNS record is published only some
// seconds after the pod starts. As etcd, kite compares a member's
// --initial-advertise-peer-urls with its --initial-cluster entry after
// resolving the names in them, and waits a while for a name that does not
// resolve yet instead of failing at once. Unlike etcd, which refuses names
// in listen URLs, kite listens on a name: on the address it resolves to,
// once it resolves. Member IDs stay computed from the URL strings, as
// etcd's are.

// DefaultResolveWait bounds the wait for a name that does not resolve:
// etcd's 30 seconds. A member whose name is still unknown by then exits
// with the lookup error (and is restarted by its supervisor).
const DefaultResolveWait = 30 * time.Second

// HostLookup is the part of *net.Resolver names are resolved with.
type HostLookup interface {
	LookupIPAddr(ctx context.Context, host string) ([]net.IPAddr, error)
}

// Resolver resolves the host names in peer and client URLs, waiting for a
// name that does not resolve yet. The zero value uses net.DefaultResolver
// (read at each lookup, so a resolver set at start-up applies), logs
// nowhere and waits DefaultResolveWait.
type Resolver struct {
	Lookup HostLookup
	Log    *slog.Logger
	// Wait bounds the retries of one name.
	Wait time.Duration
	// Backoff is the first pause between retries; it doubles up to 2 s.
	Backoff time.Duration
}

func (r Resolver) lookup() HostLookup {
	if r.Lookup != nil {
		return r.Lookup
	}
	return net.DefaultResolver
}

func (r Resolver) log() *slog.Logger {
	if r.Log != nil {
		return r.Log
	}
	return slog.New(slog.DiscardHandler)
}

// LookupHost returns the addresses of host (an address is its own),
// retrying a name that does not resolve, with backoff, for Wait at most.
func (r Resolver) LookupHost(ctx context.Context, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return []netip.Addr{a.Unmap().WithZone("")}, nil
	}
	wait, pause := r.Wait, r.Backoff
	if wait <= 0 {
		wait = DefaultResolveWait
	}
	if pause <= 0 {
		pause = 250 * time.Millisecond
	}
	start := time.Now()
	for retried := false; ; retried = true {
		ips, err := r.lookup().LookupIPAddr(ctx, host)
		if err == nil && len(ips) > 0 {
			addrs := make([]netip.Addr, 0, len(ips))
			for _, ip := range ips {
				if a, ok := netip.AddrFromSlice(ip.IP); ok {
					addrs = append(addrs, a.Unmap())
				}
			}
			if retried {
				r.log().Info("DNS name resolved", "name", host, "addresses", fmt.Sprint(addrs),
					"waited", time.Since(start).Round(time.Millisecond))
			}
			return addrs, nil
		}
		if err == nil {
			err = fmt.Errorf("no address for %s", host)
		}
		waited := time.Since(start)
		if ctx.Err() != nil || waited+pause > wait {
			return nil, fmt.Errorf("DNS name %s did not resolve (waited %v): %w", host, waited.Round(time.Millisecond), err)
		}
		r.log().Warn("waiting for DNS name "+host+" to resolve", "retry_in", pause,
			"waited", waited.Round(time.Millisecond), "gives_up_after", wait, "error", err)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("DNS name %s did not resolve: %w", host, ctx.Err())
		case <-time.After(pause):
		}
		pause = min(2*pause, 2*time.Second)
	}
}

// WaitForURLs waits until the host of every http(s) URL resolves (unix
// sockets have none): a listener opened on a name then listens on its
// address.
func (r Resolver) WaitForURLs(ctx context.Context, urls []string) error {
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
			continue // not a URL with a host; its own parser refuses it
		}
		if _, err := r.LookupHost(ctx, u.Hostname()); err != nil {
			return fmt.Errorf("%s: %w", raw, err)
		}
	}
	return nil
}

// SameURLs reports whether a and b are the same URLs in any order, as
// etcd's netutil.URLStringsEqual: equal once hosts are normalized, else
// equal once every name is resolved (a name and an address match when the
// name resolves to that address, two names when they share an address).
// "localhost" is compared by name, as etcd does: it may mean 127.0.0.1 or
// ::1. A resolution that fails after the wait is the error.
func (r Resolver) SameURLs(ctx context.Context, a, b []string) (bool, error) {
	if len(a) != len(b) {
		return false, nil
	}
	pa, err := parseURLs(a)
	if err != nil {
		return false, err
	}
	pb, err := parseURLs(b)
	if err != nil {
		return false, err
	}
	if matchURLs(pa, pb) {
		return true, nil
	}
	for _, us := range [][]peerAddr{pa, pb} {
		for i := range us {
			if us[i].addrs != nil || us[i].host == "localhost" {
				continue
			}
			if us[i].addrs, err = r.LookupHost(ctx, us[i].host); err != nil {
				return false, err
			}
		}
	}
	return matchURLs(pa, pb), nil
}

// sameResolvedURLs is how validate compares --initial-advertise-peer-urls
// with the member's --initial-cluster entry, as etcd does: equal as
// written, or once host names are resolved (waiting a bounded while for a
// name not published yet).
func sameResolvedURLs(ctx context.Context, log *slog.Logger, a, b []string) (bool, error) {
	return Resolver{Log: log}.SameURLs(ctx, a, b)
}

// peerAddr is a URL as compared: scheme, port and path as written, the
// host as an address when it is one or has been resolved, else by name.
type peerAddr struct {
	scheme, host, port, path string
	addrs                    []netip.Addr
}

func parseURLs(raw []string) ([]peerAddr, error) {
	out := make([]peerAddr, len(raw))
	for i, s := range raw {
		u, err := url.Parse(s)
		if err != nil {
			return nil, fmt.Errorf("parse URL %q: %w", s, err)
		}
		p := peerAddr{scheme: u.Scheme, host: strings.ToLower(u.Hostname()), port: u.Port(), path: strings.TrimSuffix(u.Path, "/")}
		if n, err := strconv.Atoi(p.port); err == nil {
			p.port = strconv.Itoa(n)
		}
		if a, err := netip.ParseAddr(p.host); err == nil {
			p.addrs = []netip.Addr{a.Unmap().WithZone("")}
		}
		out[i] = p
	}
	return out, nil
}

func (p peerAddr) same(q peerAddr) bool {
	if p.scheme != q.scheme || p.port != q.port || p.path != q.path {
		return false
	}
	if p.addrs == nil || q.addrs == nil {
		return p.host == q.host // a name not (yet) resolved: by name
	}
	return slices.ContainsFunc(p.addrs, func(a netip.Addr) bool { return slices.Contains(q.addrs, a) })
}

// matchURLs pairs every URL of a with a distinct one of b (the lists are
// a member's few URLs: trying every pairing is cheap).
func matchURLs(a, b []peerAddr) bool {
	if len(a) == 0 {
		return len(b) == 0
	}
	for j := range b {
		if a[0].same(b[j]) {
			rest := append(slices.Clone(b[:j]), b[j+1:]...)
			if matchURLs(a[1:], rest) {
				return true
			}
		}
	}
	return false
}
