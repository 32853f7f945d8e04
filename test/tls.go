package test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/kite-db/kite/pkg/server/tlstest"

	"github.com/kite-db/kite/internal/testenv"
)

// tlsSetup is one client TLS configuration, given to etcd as embed.Config
// and to kite as the flags of the same meaning.
type tlsSetup struct {
	certFile, keyFile, caFile, crlFile string
	clientCertAuth, autoTLS            bool
	cipherSuites                       []string
}

func (s tlsSetup) kiteFlags() []string {
	var f []string
	add := func(name, v string) {
		if v != "" {
			f = append(f, "--"+name+"="+v)
		}
	}
	add("cert-file", s.certFile)
	add("key-file", s.keyFile)
	add("trusted-ca-file", s.caFile)
	add("client-crl-file", s.crlFile)
	add("cipher-suites", strings.Join(s.cipherSuites, ","))
	if s.clientCertAuth {
		f = append(f, "--client-cert-auth")
	}
	if s.autoTLS {
		f = append(f, "--auto-tls")
	}
	return f
}

// startEtcdTLS starts an embedded etcd 3.7.3 serving clients on an https
// URL with setup; it returns the host:port, or the error etcd fails with
// (at StartEtcd, or on its error channel right after, as "listener
// failed").
func startEtcdTLS(t *testing.T, setup tlsSetup) (string, error) {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Name = "t"
	cfg.Dir = t.TempDir()
	port := freePort(t)
	cu := url.URL{Scheme: "https", Host: "127.0.0.1:" + strconv.Itoa(port)}
	pu := url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(freePort(t))}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.ClientTLSInfo = transport.TLSInfo{
		CertFile: setup.certFile, KeyFile: setup.keyFile, TrustedCAFile: setup.caFile,
		ClientCertAuth: setup.clientCertAuth, CRLFile: setup.crlFile,
	}
	cfg.ClientAutoTLS = setup.autoTLS
	cfg.CipherSuites = setup.cipherSuites
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return "", err
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		t.Fatal("embedded etcd not ready in 30s")
	}
	select {
	case err := <-e.Err():
		return "", fmt.Errorf("listener failed: %w", err)
	case <-time.After(500 * time.Millisecond):
	}
	return cu.Host, nil
}

// startKiteTLS starts kite serving clients on an https URL with setup and
// returns its host:port once it serves (it logs so: some setups refuse
// every client the test has), or the log of a kite that exited.
func startKiteTLS(t *testing.T, setup tlsSetup) (string, error) {
	t.Helper()
	if kiteBuildErr != nil {
		t.Fatalf("kite binary: %v", kiteBuildErr)
	}
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	args := append([]string{
		"--name", "t", "--data-dir", filepath.Join(t.TempDir(), "kite"),
		"--listen-client-urls", "https://" + addr, "--log-level", "info",
	}, append(freshStorageFlags(t), setup.kiteFlags()...)...)
	log := &syncBuffer{}
	p, err := testenv.Start(testenv.Command{Argv: append([]string{kiteBin}, args...), Out: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("kite log (tail):\n%s", log.Tail(4096))
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-p.Exited():
			return "", fmt.Errorf("kite exited: %s", log.Tail(2048))
		default:
		}
		// A raftsql member answers /health once its cluster has a leader,
		// as etcd's does.
		if l := log.Tail(1 << 20); strings.Contains(l, "serving client traffic securely") &&
			(!strings.HasPrefix(datastore, "raftsql") || strings.Contains(l, "elected leader")) {
			return addr, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return "", fmt.Errorf("kite not serving TLS in time: %s", log.Tail(2048))
}

// httpsHealth asks /health over a new TLS connection, HTTP/2 (what curl
// negotiates) or HTTP/1.1; ok means a 200 answer.
func httpsHealth(addr string, tc *tls.Config, h2 bool) (bool, error) {
	tr := &http.Transport{TLSClientConfig: tc.Clone(), DisableKeepAlives: true, ForceAttemptHTTP2: h2}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/health", nil)
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode == http.StatusOK, nil
}

// tlsPKI is a CA with server files and the client certificates a
// differential TLS test presents.
type tlsPKI struct {
	dir                             string
	ca, otherCA                     *tlstest.CA
	good, wrongCA, expired, revoked *tlstest.Cert
	caFile, certFile, keyFile       string
	crlFile                         string
}

func newTLSPKI(t *testing.T) *tlsPKI {
	t.Helper()
	p := &tlsPKI{dir: t.TempDir(), ca: tlstest.NewCA(t, "test CA"), otherCA: tlstest.NewCA(t, "other CA")}
	server := p.ca.Issue(t, tlstest.Options{CommonName: "server", Server: true})
	p.good = p.ca.Issue(t, tlstest.Options{CommonName: "good"})
	p.wrongCA = p.otherCA.Issue(t, tlstest.Options{CommonName: "wrong-ca"})
	p.expired = p.ca.Issue(t, tlstest.Options{CommonName: "expired", Expired: true})
	p.revoked = p.ca.Issue(t, tlstest.Options{CommonName: "revoked"})
	p.caFile = tlstest.Write(t, p.dir, "ca.pem", p.ca.PEM)
	p.certFile = tlstest.Write(t, p.dir, "server.pem", server.CertPEM)
	p.keyFile = tlstest.Write(t, p.dir, "server-key.pem", server.KeyPEM)
	p.crlFile = tlstest.Write(t, p.dir, "crl.der", p.ca.CRL(t, p.revoked))
	return p
}

// client is a client TLS config trusting the CA (or nothing, verifying no
// server, for --auto-tls) and presenting cert (nil: none).
func (p *tlsPKI) client(t *testing.T, cert *tlstest.Cert, verifyServer bool) *tls.Config {
	c := &tls.Config{RootCAs: tlstest.Pool(p.ca), InsecureSkipVerify: !verifyServer}
	if cert != nil {
		c.Certificates = []tls.Certificate{cert.TLS(t)}
	}
	return c
}
