package test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/kite-db/kite/pkg/server/tlstest"
)

// outcomes asks /health with every client certificate of p, over HTTP/1.1
// and HTTP/2, and says which were served.
func outcomes(t *testing.T, addr string, p *tlsPKI, verifyServer bool) map[string]string {
	t.Helper()
	got := map[string]string{}
	for _, c := range []struct {
		name string
		cert *tlstest.Cert
	}{
		{"no certificate", nil}, {"good", p.good}, {"other CA", p.wrongCA}, {"expired", p.expired}, {"revoked", p.revoked},
	} {
		for _, h2 := range []bool{false, true} {
			ok, err := httpsHealth(addr, p.client(t, c.cert, verifyServer), h2)
			res := "served"
			if !ok {
				res = "refused"
			}
			if err != nil && testing.Verbose() {
				t.Logf("%s h2=%v: %v", c.name, h2, err)
			}
			got[fmt.Sprintf("%s/h2=%v", c.name, h2)] = res
		}
	}
	return got
}

func diffOutcomes(t *testing.T, setup string, etcd, kite map[string]string) {
	t.Helper()
	for k, want := range etcd {
		if kite[k] != want {
			t.Errorf("%s, client %s: etcd %s, kite %s", setup, k, want, kite[k])
		}
	}
	t.Logf("%s: etcd %v", setup, etcd)
}

// TestDiffTLSClientCerts: for each TLS setup, the same clients are served or
// refused by etcd 3.7.3 and by kite.
func TestDiffTLSClientCerts(t *testing.T) {
	p := newTLSPKI(t)
	for _, tt := range []struct {
		name  string
		setup tlsSetup
		// verify: clients verify the server certificate (not with auto-tls).
		verify bool
	}{
		{"server TLS only", tlsSetup{certFile: p.certFile, keyFile: p.keyFile}, true},
		{"trusted-ca-file alone", tlsSetup{certFile: p.certFile, keyFile: p.keyFile, caFile: p.caFile}, true},
		{"client-cert-auth without trusted-ca-file", tlsSetup{certFile: p.certFile, keyFile: p.keyFile, clientCertAuth: true}, true},
		{"client-cert-auth, trusted-ca-file and CRL", tlsSetup{certFile: p.certFile, keyFile: p.keyFile, caFile: p.caFile, clientCertAuth: true, crlFile: p.crlFile}, true},
		{"auto-tls with client-cert-auth and trusted-ca-file", tlsSetup{autoTLS: true, caFile: p.caFile, clientCertAuth: true}, false},
	} {
		t.Run(strings.ReplaceAll(tt.name, " ", "_"), func(t *testing.T) {
			etcdAddr, err := startEtcdTLS(t, tt.setup)
			if err != nil {
				t.Fatalf("etcd: %v", err)
			}
			kiteAddr, err := startKiteTLS(t, tt.setup)
			if err != nil {
				t.Fatalf("kite: %v", err)
			}
			diffOutcomes(t, tt.name, outcomes(t, etcdAddr, p, tt.verify), outcomes(t, kiteAddr, p, tt.verify))
		})
	}
}

// TestDiffTLSFilesChangedAtRuntime: a CRL rewritten after the start revokes
// at the next connection; a trusted CA file replaced after the start is not
// reread (etcd loads it when it starts serving) — the same on both.
func TestDiffTLSFilesChangedAtRuntime(t *testing.T) {
	p := newTLSPKI(t)
	setup := tlsSetup{certFile: p.certFile, keyFile: p.keyFile, caFile: p.caFile, clientCertAuth: true, crlFile: p.crlFile}
	etcdAddr, err := startEtcdTLS(t, setup)
	if err != nil {
		t.Fatalf("etcd: %v", err)
	}
	kiteAddr, err := startKiteTLS(t, setup)
	if err != nil {
		t.Fatalf("kite: %v", err)
	}
	tlstest.Replace(t, p.dir, filepath.Base(p.crlFile), p.ca.CRL(t, p.revoked, p.good))
	tlstest.Replace(t, p.dir, filepath.Base(p.caFile), append(p.otherCA.PEM, p.ca.PEM...))
	diffOutcomes(t, "CRL revoking good and CA file with the other CA, both rewritten after the start",
		outcomes(t, etcdAddr, p, true), outcomes(t, kiteAddr, p, true))
}

// TestDiffTLSRefusedAtStart: configurations etcd refuses at its start are
// refused by kite at its start, with etcd's message.
func TestDiffTLSRefusedAtStart(t *testing.T) {
	p := newTLSPKI(t)
	for _, tt := range []struct {
		name  string
		setup tlsSetup
		want  string
	}{
		{"https without cert and key", tlsSetup{}, "TLS key/cert (--cert-file, --key-file) must be provided for client url https://"},
		{"cipher suites without one HTTP/2 requires", tlsSetup{certFile: p.certFile, keyFile: p.keyFile, cipherSuites: []string{"TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"}}, "HTTP/2-required AES_128_GCM_SHA256"},
	} {
		t.Run(strings.ReplaceAll(tt.name, " ", "_"), func(t *testing.T) {
			_, etcdErr := startEtcdTLS(t, tt.setup)
			if etcdErr == nil || !strings.Contains(etcdErr.Error(), tt.want) {
				t.Fatalf("etcd: %v, want an error with %q", etcdErr, tt.want)
			}
			t.Logf("etcd: %v", etcdErr)
			_, kiteErr := startKiteTLS(t, tt.setup)
			if kiteErr == nil || !strings.Contains(kiteErr.Error(), "kite exited") || !strings.Contains(kiteErr.Error(), tt.want) {
				t.Fatalf("kite: %v, want an exit with %q", kiteErr, tt.want)
			}
		})
	}
}

// TestDiffTLSGRPC: a clientv3 program over mTLS sees the same answers from
// both.
func TestDiffTLSGRPC(t *testing.T) {
	p := newTLSPKI(t)
	setup := tlsSetup{certFile: p.certFile, keyFile: p.keyFile, caFile: p.caFile, clientCertAuth: true, crlFile: p.crlFile}
	etcdAddr, err := startEtcdTLS(t, setup)
	if err != nil {
		t.Fatal(err)
	}
	kiteAddr, err := startKiteTLS(t, setup)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t, 30*time.Second)
	var got []string
	for _, addr := range []string{etcdAddr, kiteAddr} {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{"https://" + addr}, TLS: p.client(t, p.good, true), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Put(ctx, "k", "v"); err != nil {
			t.Fatalf("put on %s: %v", addr, err)
		}
		r, err := c.Get(ctx, "k")
		if err != nil {
			t.Fatalf("get on %s: %v", addr, err)
		}
		got = append(got, fmt.Sprintf("rev %d kvs %d %s=%s", r.Header.Revision, len(r.Kvs), r.Kvs[0].Key, r.Kvs[0].Value))
	}
	if got[0] != got[1] {
		t.Fatalf("etcd %q, kite %q", got[0], got[1])
	}
}

// TestEtcdctlTLS: etcdctl 3.7.3 with --cacert --cert --key against kite over
// https, compared with etcd: put, get, endpoint status and health; without
// a certificate both refuse.
func TestEtcdctlTLS(t *testing.T) {
	p := newTLSPKI(t)
	setup := tlsSetup{certFile: p.certFile, keyFile: p.keyFile, caFile: p.caFile, clientCertAuth: true}
	etcdAddr, err := startEtcdTLS(t, setup)
	if err != nil {
		t.Fatal(err)
	}
	kiteAddr, err := startKiteTLS(t, setup)
	if err != nil {
		t.Fatal(err)
	}
	certFile := tlstest.Write(t, p.dir, "client.pem", p.good.CertPEM)
	keyFile := tlstest.Write(t, p.dir, "client-key.pem", p.good.KeyPEM)
	auth := []string{"--cacert", p.caFile, "--cert", certFile, "--key", keyFile}
	for _, args := range [][]string{
		{"put", "greeting", "hello"},
		{"get", "greeting"},
		{"get", "greeting", "-w", "json"},
		{"endpoint", "status", "-w", "json"},
		{"endpoint", "health"},
	} {
		var outs []string
		for _, addr := range []string{etcdAddr, kiteAddr} {
			out, err := ctl(t, "https://"+addr, "", append(append([]string{}, auth...), args...)...)
			if err != nil {
				t.Fatalf("etcdctl %v on %s: %v\n%s", args, addr, err, out)
			}
			out = strings.ReplaceAll(out, addr, "ADDR")
			outs = append(outs, normCtl(out, nil))
		}
		if args[0] == "endpoint" {
			// Status carries sizes, raft indexes and versions of each
			// server's own storage, health a timing: compare the shape.
			outs[0], outs[1] = ctlShape(outs[0]), ctlShape(outs[1])
		}
		if outs[0] != outs[1] {
			t.Errorf("etcdctl %v:\netcd: %s\nkite: %s", args, outs[0], outs[1])
		}
	}
	for _, addr := range []string{etcdAddr, kiteAddr} {
		out, err := ctl(t, "https://"+addr, "", "--cacert", p.caFile, "--dial-timeout", "2s", "--command-timeout", "3s", "get", "greeting")
		if err == nil {
			t.Errorf("etcdctl without a client certificate on %s: served\n%s", addr, out)
		}
	}
}

// ctlShape keeps what does not depend on the server: the health verdict,
// or the JSON keys of a status.
func ctlShape(s string) string {
	switch {
	case strings.Contains(s, "is healthy"):
		return "healthy"
	case strings.HasPrefix(strings.TrimSpace(s), "["):
		return fmt.Sprint(strings.Contains(s, `"Endpoint":"https://ADDR"`), strings.Contains(s, `"version"`))
	}
	return s
}
