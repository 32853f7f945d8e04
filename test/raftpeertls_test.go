package test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/kite-db/kite/pkg/server/tlstest"
)

// TestRaftSQLPeerTLS: members on https peer URLs with etcd's peer TLS
// flags and client-certificate authentication replicate as usual; a peer
// connection without a certificate from the trusted CA, or with a common
// name not in --peer-cert-allowed-cn, is refused at the handshake, and a
// member restarted with such a certificate cannot take part (it never
// learns a leader) until it is given a good one again.
func TestRaftSQLPeerTLS(t *testing.T) {
	if againstEtcd {
		t.Skip("kite's peer TLS: etcd is proven by its own tests")
	}
	dir := t.TempDir()
	ca, other := tlstest.NewCA(t, "peer CA"), tlstest.NewCA(t, "other CA")
	caFile := tlstest.Write(t, dir, "ca.pem", ca.PEM)
	issue := func(from *tlstest.CA, name, cn string) []string {
		c := from.Issue(t, tlstest.Options{CommonName: cn, Server: true})
		return []string{"--peer-cert-file", tlstest.Write(t, dir, name+".pem", c.CertPEM),
			"--peer-key-file", tlstest.Write(t, dir, name+"-key.pem", c.KeyPEM)}
	}
	certs := [][]string{issue(ca, "m0", "kite-peer"), issue(ca, "m1", "kite-peer"), issue(ca, "m2", "kite-peer")}
	good2 := certs[2]
	c := startClusterOf(t, 3, &cluster{
		scheme: "https",
		extra: []string{"--peer-trusted-ca-file", caFile, "--peer-client-cert-auth",
			"--peer-cert-allowed-cn", "kite-peer"},
		perMember: func(i int) []string { return certs[i] },
	})
	ctx := testCtx(t, 2*time.Minute)
	rev := putEventually(t, c.members[0], "ptls/a", "1", 10*time.Second).Header.Revision
	waitApplied(t, c, rev)
	sameHashKV(t, ctx, c, rev)

	// The peer URL itself: a handshake without a good certificate fails.
	peer := c.members[1].peerURL + "/kite/members"
	try := func(cert *tlstest.Cert) error {
		cfg := &tls.Config{RootCAs: tlstest.Pool(ca)}
		if cert != nil {
			cfg.Certificates = []tls.Certificate{cert.TLS(t)}
		}
		hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
		resp, err := hc.Get(peer)
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}
	if err := try(nil); err == nil {
		t.Error("peer URL served a client without a certificate")
	}
	if err := try(other.Issue(t, tlstest.Options{CommonName: "kite-peer"})); err == nil {
		t.Error("peer URL served a certificate of another CA")
	}
	if err := try(ca.Issue(t, tlstest.Options{CommonName: "intruder"})); err == nil {
		t.Error("peer URL served a common name not in --peer-cert-allowed-cn")
	}
	if err := try(ca.Issue(t, tlstest.Options{CommonName: "kite-peer"})); err != nil {
		t.Errorf("peer URL refused a good certificate: %v", err)
	}

	// A member restarted with a bad certificate is shut out of the cluster.
	m := c.members[2]
	for _, bad := range []struct {
		what  string
		flags []string
	}{
		{"another CA's certificate", issue(other, "m2-other", "kite-peer")},
		{"a common name not allowed", issue(ca, "m2-intruder", "intruder")},
	} {
		m.Kill()
		certs[2] = bad.flags
		if err := m.start(); err != nil {
			t.Fatal(err)
		}
		during := putEventually(t, c.members[0], "ptls/during", bad.what, 10*time.Second).Header.Revision
		time.Sleep(3 * time.Second) // several election timeouts
		if st, err := m.status(); err == nil && st.Leader != 0 {
			t.Fatalf("member with %s knows leader %x: it took part in the cluster", bad.what, st.Leader)
		}
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := m.Client.Get(sctx, "ptls/during")
		cancel()
		if err == nil && len(resp.Kvs) == 1 && resp.Kvs[0].ModRevision == during {
			t.Fatalf("member with %s has the write made after its start", bad.what)
		}
	}
	m.Kill()
	certs[2] = good2
	m.Restart()
	rev = putEventually(t, c.members[1], "ptls/after", "2", 10*time.Second).Header.Revision
	waitApplied(t, c, rev)
	sameHashKV(t, ctx, c, rev)
}

// TestRaftSQLPeerAutoTLS: --peer-auto-tls gives each member a self-signed
// certificate for its https peer URLs, in <data-dir>/fixtures/peer.
func TestRaftSQLPeerAutoTLS(t *testing.T) {
	if againstEtcd {
		t.Skip("kite's peer TLS: etcd is proven by its own tests")
	}
	c := startClusterOf(t, 3, &cluster{scheme: "https", extra: []string{"--peer-auto-tls"}})
	ctx := testCtx(t, time.Minute)
	rev := putEventually(t, c.members[2], "pauto/a", "1", 10*time.Second).Header.Revision
	waitApplied(t, c, rev)
	sameHashKV(t, ctx, c, rev)
	for _, m := range c.members {
		if matches, _ := filepath.Glob(filepath.Join(m.dataDir, "fixtures", "peer", "cert.pem")); len(matches) == 0 {
			t.Errorf("member %s: no self-signed certificate in fixtures/peer", m.name)
		}
	}
}

// TestRaftSQLPeerClientCert: a member presents --peer-client-cert-file,
// not its server certificate, when it connects to another member (etcd's
// flag). The server certificates here are for server authentication only,
// which a peer checking client certificates refuses: the cluster forms
// only if every member presents its client certificate. The TLS version
// flags apply to peers too.
func TestRaftSQLPeerClientCert(t *testing.T) {
	if againstEtcd {
		t.Skip("kite's peer TLS: etcd is proven by its own tests")
	}
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "peer CA")
	caFile := tlstest.Write(t, dir, "ca.pem", ca.PEM)
	flags := func(i int) []string {
		srv := ca.Issue(t, tlstest.Options{CommonName: "kite-peer", Server: true, ServerOnly: true})
		cli := ca.Issue(t, tlstest.Options{CommonName: "kite-peer"})
		name := fmt.Sprintf("m%d", i)
		return []string{
			"--peer-cert-file", tlstest.Write(t, dir, name+".pem", srv.CertPEM),
			"--peer-key-file", tlstest.Write(t, dir, name+"-key.pem", srv.KeyPEM),
			"--peer-client-cert-file", tlstest.Write(t, dir, name+"-client.pem", cli.CertPEM),
			"--peer-client-key-file", tlstest.Write(t, dir, name+"-client-key.pem", cli.KeyPEM),
		}
	}
	c := startClusterOf(t, 3, &cluster{
		scheme: "https",
		extra: []string{"--peer-trusted-ca-file", caFile, "--peer-client-cert-auth",
			"--peer-cert-allowed-cn", "kite-peer", "--tls-min-version", "TLS1.3"},
		perMember: flags,
	})
	ctx := testCtx(t, time.Minute)
	rev := putEventually(t, c.members[0], "pcc/a", "1", 10*time.Second).Header.Revision
	waitApplied(t, c, rev)
	sameHashKV(t, ctx, c, rev)

	// TLS 1.3 only on the peer URL: a TLS 1.2 client is refused.
	cli := ca.Issue(t, tlstest.Options{CommonName: "kite-peer"})
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: tlstest.Pool(ca), Certificates: []tls.Certificate{cli.TLS(t)}, MaxVersion: tls.VersionTLS12}}}
	if resp, err := hc.Get(c.members[1].peerURL + "/kite/members"); err == nil {
		resp.Body.Close()
		t.Errorf("peer URL with --tls-min-version TLS1.3 served a TLS 1.2 client")
	}
}
