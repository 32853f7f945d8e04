package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/kite-db/kite/pkg/drivers/raftsql"
)

// DNS SRV discovery, etcd's --discovery-srv: a new member builds
// --initial-cluster from the SRV records of _etcd-server-ssl._tcp.DOMAIN
// (https peer URLs) and _etcd-server._tcp.DOMAIN (http), with
// -<--discovery-srv-name> appended to the service when it is set. Every
// record is a member; the one whose target resolves to this member's
// --initial-advertise-peer-urls is named --name, the others get etcd's
// placeholder names "0", "1", ... (counted per service, as etcd does):
// member IDs come from the peer URLs, so names do not change the cluster.
// This follows etcd's srv.GetCluster and embed.Config.GetDNSClusterNames,
// so the same records give a kite cluster the members an etcd cluster
// would get.

// conflictBootstrapFlags is etcd's embed.ErrConflictBootstrapFlags, word
// for word.
const conflictBootstrapFlags = `multiple discovery or bootstrap flags are set. Choose one of "initial-cluster", "discovery-endpoints" or "discovery-srv"`

// srvResolver is the part of *net.Resolver discovery uses (tests give a
// fake).
type srvResolver interface {
	LookupSRV(ctx context.Context, service, proto, name string) (string, []*net.SRV, error)
	raftsql.HostLookup
}

// checkDiscoveryFlags refuses what etcd refuses: --discovery-srv next to
// --initial-cluster (from flags or the environment alike).
func (f *serveFlags) checkDiscoveryFlags() error {
	if f.discoverySRV != "" && f.initialCluster != "" {
		return errors.New(conflictBootstrapFlags)
	}
	if f.discoverySRVName != "" && f.discoverySRV == "" {
		return errors.New("--discovery-srv-name needs --discovery-srv (the DNS domain of the SRV records)")
	}
	return nil
}

// discover fills the raftsql bootstrap's initial cluster from DNS, as
// etcd's PeerURLsMapAndToken does for --discovery-srv. With https peers and
// no --peer-trusted-ca-file, peer certificates are checked against the
// domain, as in etcd.
func (f *serveFlags) discover(ctx context.Context, dns srvResolver, log *slog.Logger) error {
	cluster, err := discoverCluster(ctx, dns, log, f.name, f.discoverySRV, f.discoverySRVName, f.raft.AdvertisePeer)
	if err != nil {
		return err
	}
	f.raft.InitialCluster = cluster
	for _, urls := range cluster {
		for _, u := range urls {
			if strings.HasPrefix(u, "https://") && f.raft.PeerTLS.Info.TrustedCAFile == "" {
				f.raft.PeerTLS.Info.ServerName = f.discoverySRV
			}
		}
	}
	return nil
}

// discoverCluster returns the initial cluster of the SRV records of
// domain, this member (name, advertised at advertisePeer) in it.
func discoverCluster(ctx context.Context, dns srvResolver, log *slog.Logger, name, domain, serviceName string, advertisePeer []string) (map[string][]string, error) {
	suffix := ""
	if serviceName != "" {
		suffix = "-" + serviceName
	}
	// This member's own names must resolve to be found among the targets:
	// they are waited for, as every name this member needs (a pod's record
	// comes some seconds after the pod).
	own, err := resolveOwn(ctx, raftsql.Resolver{Lookup: dns, Log: log}, advertisePeer)
	if err != nil {
		return nil, fmt.Errorf("resolve --initial-advertise-peer-urls for DNS discovery: %w", err)
	}
	var parts []string
	var errs []error
	for _, s := range []struct{ scheme, service string }{
		{"https", "etcd-server-ssl" + suffix},
		{"http", "etcd-server" + suffix},
	} {
		found, err := srvCluster(ctx, dns, s.scheme, s.service, name, domain, own)
		log.Info("get cluster for "+s.service+" SRV", "service-scheme", s.scheme, "server-name", name,
			"discovery-srv", domain, "found-cluster", strings.Join(found, ","), "error", err)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		parts = append(parts, found...)
	}
	if len(parts) == 0 {
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("no SRV records for _etcd-server-ssl%s._tcp.%s or _etcd-server%s._tcp.%s", suffix, domain, suffix, domain)
	}
	if len(errs) > 0 {
		log.Warn("failed to resolve during SRV discovery", "error", errors.Join(errs...))
	}
	for _, p := range parts {
		log.Info("got bootstrap from DNS for etcd-server", "node", p)
	}
	cluster, err := raftsql.ParseInitialCluster(strings.Join(parts, ","))
	if err != nil {
		return nil, err
	}
	if _, ok := cluster[name]; !ok {
		return nil, fmt.Errorf("cannot find local etcd member %q in SRV records", name)
	}
	return cluster, nil
}

// ownURL is one of this member's advertised peer URLs with the addresses
// its host resolves to.
type ownURL struct {
	raw, scheme string
	port        uint16
	addrs       []netip.Addr
}

func resolveOwn(ctx context.Context, r raftsql.Resolver, advertisePeer []string) ([]ownURL, error) {
	var own []ownURL
	for _, raw := range advertisePeer {
		u, err := url.Parse(raw)
		if err != nil {
			return nil, fmt.Errorf("parse %q: %w", raw, err)
		}
		port, err := strconv.ParseUint(u.Port(), 10, 16)
		if err != nil {
			return nil, fmt.Errorf("%q: want scheme://host:port", raw)
		}
		addrs, err := r.LookupHost(ctx, u.Hostname())
		if err != nil {
			return nil, err
		}
		own = append(own, ownURL{raw: raw, scheme: u.Scheme, port: uint16(port), addrs: addrs})
	}
	return own, nil
}

// srvCluster is etcd's srv.GetCluster for one service: name=scheme://
// target:port for each record whose target resolves (one lookup, as etcd:
// a record published before its name is skipped), this member's by name.
// It fails only when no record gave a member.
func srvCluster(ctx context.Context, dns srvResolver, scheme, service, name, domain string, own []ownURL) ([]string, error) {
	_, records, err := dns.LookupSRV(ctx, service, "tcp", domain)
	if err != nil {
		return nil, fmt.Errorf("error querying DNS SRV records for _%s %w", service, err)
	}
	var (
		parts    []string
		tempName int
		lastErr  error
	)
	for _, rec := range records {
		port := strconv.Itoa(int(rec.Port))
		ips, err := dns.LookupIPAddr(ctx, rec.Target)
		if err != nil {
			lastErr = err
			continue
		}
		mine := ownMatch(own, ips, rec.Port)
		n := name
		if mine == nil {
			n = strconv.Itoa(tempName)
			tempName++
		}
		// SRV targets end in a dot; peer URLs do not.
		urlHost := net.JoinHostPort(strings.TrimSuffix(rec.Target, "."), port)
		if mine != nil && mine.scheme != scheme {
			lastErr = fmt.Errorf("bootstrap at %s from DNS for %s has scheme mismatch with expected peer %s", scheme+"://"+urlHost, service, mine.raw)
			continue
		}
		parts = append(parts, fmt.Sprintf("%s=%s://%s", n, scheme, urlHost))
	}
	if len(parts) == 0 {
		if lastErr == nil {
			lastErr = errors.New("no member in the records")
		}
		return nil, fmt.Errorf("error querying DNS SRV records for _%s %w", service, lastErr)
	}
	return parts, nil
}

// ownMatch returns this member's advertised URL a record's target and
// port stand for (a shared address, the same port), or nil.
func ownMatch(own []ownURL, ips []net.IPAddr, port uint16) *ownURL {
	for i, o := range own {
		if o.port != port {
			continue
		}
		for _, ip := range ips {
			if a, ok := netip.AddrFromSlice(ip.IP); ok && slices.Contains(o.addrs, a.Unmap()) {
				return &own[i]
			}
		}
	}
	return nil
}
