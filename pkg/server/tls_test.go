package server

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/pem"

	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kite-db/kite/pkg/server/tlstest"
)

// tlsEnv is a CA with the server's files on disk and client certificates
// for every case a server must tell apart.
type tlsEnv struct {
	dir                                string
	ca, otherCA                        *tlstest.CA
	server                             *tlstest.Cert
	good, wrongCA, expired, revoked    *tlstest.Cert
	caFile, certFile, keyFile, crlFile string
}

func newTLSEnv(t *testing.T) *tlsEnv {
	t.Helper()
	e := &tlsEnv{dir: t.TempDir(), ca: tlstest.NewCA(t, "kite test CA"), otherCA: tlstest.NewCA(t, "other CA")}
	e.server = e.ca.Issue(t, tlstest.Options{CommonName: "kite", Server: true})
	e.good = e.ca.Issue(t, tlstest.Options{CommonName: "good"})
	e.wrongCA = e.otherCA.Issue(t, tlstest.Options{CommonName: "wrong-ca"})
	e.expired = e.ca.Issue(t, tlstest.Options{CommonName: "expired", Expired: true})
	e.revoked = e.ca.Issue(t, tlstest.Options{CommonName: "revoked"})
	e.caFile = tlstest.Write(t, e.dir, "ca.pem", e.ca.PEM)
	e.certFile = tlstest.Write(t, e.dir, "server.pem", e.server.CertPEM)
	e.keyFile = tlstest.Write(t, e.dir, "server-key.pem", e.server.KeyPEM)
	e.crlFile = tlstest.Write(t, e.dir, "crl.der", e.ca.CRL(t, e.revoked))
	return e
}

// mTLS is the strictest setup: CA, client-cert-auth and CRL.
func (e *tlsEnv) mTLS() TLSConfig {
	return TLSConfig{CertFile: e.certFile, KeyFile: e.keyFile, TrustedCAFile: e.caFile, ClientCertAuth: true, CRLFile: e.crlFile}
}

// client is a client's TLS config trusting the test CA, presenting cert
// (none if nil).
func (e *tlsEnv) client(t *testing.T, cert *tlstest.Cert) *tls.Config {
	c := &tls.Config{RootCAs: tlstest.Pool(e.ca)}
	if cert != nil {
		c.Certificates = []tls.Certificate{cert.TLS(t)}
	}
	return c
}

// startTLSServer serves cfg with TLS on a free loopback port (and on the
// other URLs of cfg); it returns the server and the TLS host:port.
func startTLSServer(t *testing.T, cfg Config) (*Server, string) {
	t.Helper()
	cfg.ListenClientURLs = append([]string{"https://127.0.0.1:0"}, cfg.ListenClientURLs...)
	s, _ := mustStartServer(t, cfg)
	return s, s.Addrs()[0].String()
}

// httpsGet fetches path over a new TLS connection, HTTP/2 (as curl
// negotiates) or HTTP/1.1.
func httpsGet(addr string, tc *tls.Config, h2 bool, path string) (status int, proto string, err error) {
	tr := &http.Transport{TLSClientConfig: tc.Clone(), DisableKeepAlives: true, ForceAttemptHTTP2: h2}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	resp, err := c.Get("https://" + addr + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Proto, nil
}

// newTLSClient is a clientv3 client of endpoint over tc (nil: no TLS).
func newTLSClient(t *testing.T, endpoint string, tc *tls.Config) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, TLS: tc, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("client %s: %v", endpoint, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func putGet(ctx context.Context, c *clientv3.Client, key, val string) error {
	if _, err := c.Put(ctx, key, val); err != nil {
		return fmt.Errorf("put: %w", err)
	}
	resp, err := c.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("get: %w", err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != val {
		return fmt.Errorf("get %s: %v", key, resp.Kvs)
	}
	return nil
}

// TestTLSClientCertMatrix: with --trusted-ca-file, --client-cert-auth and a
// CRL, only a current certificate of the CA that is not revoked is served;
// gRPC and the HTTP endpoints share the TLS port, over HTTP/1.1 and HTTP/2.
func TestTLSClientCertMatrix(t *testing.T) {
	e := newTLSEnv(t)
	_, addr := startTLSServer(t, Config{TLS: e.mTLS()})
	for _, tt := range []struct {
		name string
		cert *tlstest.Cert
		ok   bool
	}{
		{"no client certificate", nil, false},
		{"certificate of another CA", e.wrongCA, false},
		{"expired certificate", e.expired, false},
		{"certificate revoked by the CRL", e.revoked, false},
		{"good certificate", e.good, true},
	} {
		for _, h2 := range []bool{false, true} {
			status, proto, err := httpsGet(addr, e.client(t, tt.cert), h2, "/health")
			switch {
			case tt.ok && (err != nil || status != http.StatusOK):
				t.Errorf("%s (h2 %v): want /health served, got %d %v", tt.name, h2, status, err)
			case tt.ok && h2 != (proto == "HTTP/2.0"):
				t.Errorf("%s: h2 %v but served over %s", tt.name, h2, proto)
			case !tt.ok && err == nil:
				t.Errorf("%s (h2 %v): served (%d), want the connection refused", tt.name, h2, status)
			}
		}
	}
	c := newTLSClient(t, "https://"+addr, e.client(t, e.good))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := putGet(ctx, c, "tls", "yes"); err != nil {
		t.Fatalf("gRPC over TLS with a good certificate: %v", err)
	}
	for _, path := range []string{"/livez", "/readyz", "/version", "/metrics"} {
		if status, _, err := httpsGet(addr, e.client(t, e.good), true, path); err != nil || status != http.StatusOK {
			t.Errorf("%s over TLS: %d %v", path, status, err)
		}
	}
}

// TestTLSServerOnly: without a CA and client-cert-auth any client is served
// over TLS, with or without a certificate.
func TestTLSServerOnly(t *testing.T) {
	e := newTLSEnv(t)
	_, addr := startTLSServer(t, Config{TLS: TLSConfig{CertFile: e.certFile, KeyFile: e.keyFile}})
	for _, cert := range []*tlstest.Cert{nil, e.wrongCA} {
		if status, _, err := httpsGet(addr, e.client(t, cert), true, "/health"); err != nil || status != http.StatusOK {
			t.Errorf("client cert %v: %d %v", cert != nil, status, err)
		}
	}
}

func peerSerial(t *testing.T, addr string, tc *tls.Config) string {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, tc)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

// TestTLSRotation: certificate and key files replaced on disk serve the
// next connection, without a restart; connections made before go on.
func TestTLSRotation(t *testing.T) {
	e := newTLSEnv(t)
	_, addr := startTLSServer(t, Config{TLS: e.mTLS()})
	tc := e.client(t, e.good)
	if got, want := peerSerial(t, addr, tc), e.server.X509.SerialNumber.String(); got != want {
		t.Fatalf("first certificate: serial %s, want %s", got, want)
	}
	old := newTLSClient(t, "https://"+addr, tc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := putGet(ctx, old, "before", "1"); err != nil {
		t.Fatal(err)
	}

	next := e.ca.Issue(t, tlstest.Options{CommonName: "kite rotated", Server: true})
	tlstest.Replace(t, e.dir, filepath.Base(e.keyFile), next.KeyPEM)
	tlstest.Replace(t, e.dir, filepath.Base(e.certFile), next.CertPEM)
	if got, want := peerSerial(t, addr, tc), next.X509.SerialNumber.String(); got != want {
		t.Fatalf("after rotation: serial %s, want the new certificate's %s", got, want)
	}
	if err := putGet(ctx, newTLSClient(t, "https://"+addr, tc), "after", "2"); err != nil {
		t.Fatalf("new client after rotation: %v", err)
	}
	if err := putGet(ctx, old, "still", "3"); err != nil {
		t.Fatalf("client connected before the rotation: %v", err)
	}
}

// TestTLSWithUnixSocket: a unix socket without TLS serves next to the TLS
// port.
func TestTLSWithUnixSocket(t *testing.T) {
	e := newTLSEnv(t)
	sock := filepath.Join(t.TempDir(), "kite.sock")
	_, addr := startTLSServer(t, Config{TLS: e.mTLS(), ListenClientURLs: []string{"unix://" + sock}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := putGet(ctx, newTLSClient(t, "unix://"+sock, nil), "plain", "unix"); err != nil {
		t.Fatalf("unix socket without TLS: %v", err)
	}
	if err := putGet(ctx, newTLSClient(t, "https://"+addr, e.client(t, e.good)), "secure", "tls"); err != nil {
		t.Fatalf("TLS: %v", err)
	}
}

// TestTLSGarbageDoesNotDisturb: clients that stay silent, send garbage
// instead of a handshake, or garbage at the HTTP/2 or HTTP/1 layer after a
// good handshake, delay neither a connected client's requests nor a new
// client's handshake.
func TestTLSGarbageDoesNotDisturb(t *testing.T) {
	e := newTLSEnv(t)
	_, addr := startTLSServer(t, Config{TLS: e.mTLS()})
	good := newTLSClient(t, "https://"+addr, e.client(t, e.good))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := putGet(ctx, good, "warm", "up"); err != nil {
		t.Fatal(err)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var conns sync.Map
	junk := func() []byte {
		b := make([]byte, 512)
		rand.Read(b)
		return b
	}
	attack := func(mk func() (net.Conn, error), payload func() []byte) {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, err := mk()
				if err != nil {
					continue
				}
				conns.Store(c, struct{}{})
				if payload != nil {
					c.Write(payload())
				}
				c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
				c.Read(make([]byte, 64))
			}
		})
	}
	raw := func() (net.Conn, error) { return net.Dial("tcp", addr) }
	handshaken := func(proto string) func() (net.Conn, error) {
		return func() (net.Conn, error) {
			tc := e.client(t, e.good)
			tc.NextProtos = []string{proto}
			return tls.Dial("tcp", addr, tc)
		}
	}
	for range 2 {
		attack(raw, nil) // silent: holds a pending handshake
		attack(raw, junk)
		attack(handshaken("h2"), func() []byte { return append([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), junk()...) })
		attack(handshaken("http/1.1"), junk)
	}
	defer func() {
		close(stop)
		wg.Wait()
		conns.Range(func(c, _ any) bool { c.(net.Conn).Close(); return true })
	}()

	for i := range 50 {
		start := time.Now()
		if err := putGet(ctx, good, "k", fmt.Sprint(i)); err != nil {
			t.Fatalf("request %d of the good client: %v", i, err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("request %d of the good client took %v", i, d)
		}
	}
	start := time.Now()
	if err := putGet(ctx, newTLSClient(t, "https://"+addr, e.client(t, e.good)), "new", "client"); err != nil {
		t.Fatalf("a new client during the garbage: %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("a new client's first request took %v", d)
	}
}

// TestTLSRefusedAtStart: etcd's start-up checks and messages.
func TestTLSRefusedAtStart(t *testing.T) {
	e := newTLSEnv(t)
	for _, tt := range []struct {
		name string
		tls  TLSConfig
		want string
	}{
		{"https without cert and key", TLSConfig{}, "TLS key/cert (--cert-file, --key-file) must be provided for client url https://127.0.0.1:0 with HTTPS scheme"},
		{"cert without key", TLSConfig{CertFile: e.certFile}, "KeyFile and CertFile must both be present"},
		{"missing cert file", TLSConfig{CertFile: e.certFile + ".missing", KeyFile: e.keyFile}, "no such file"},
		{"missing CA file", TLSConfig{CertFile: e.certFile, KeyFile: e.keyFile, TrustedCAFile: e.caFile + ".missing"}, "no such file"},
		{"unknown TLS version", TLSConfig{CertFile: e.certFile, KeyFile: e.keyFile, MinVersion: "TLS1.1"}, `unexpected TLS version "TLS1.1" (must be one of: TLS1.2, TLS1.3)`},
		{"min above max", TLSConfig{CertFile: e.certFile, KeyFile: e.keyFile, MinVersion: "TLS1.3", MaxVersion: "TLS1.2"}, "min version (TLS1.3) is greater than max version (TLS1.2)"},
		{"ciphers with TLS1.3 only", TLSConfig{CertFile: e.certFile, KeyFile: e.keyFile, MinVersion: "TLS1.3", CipherSuites: []string{"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"}}, "cipher suites cannot be configured when only TLS1.3 is enabled"},
		{"unknown cipher", TLSConfig{CertFile: e.certFile, KeyFile: e.keyFile, CipherSuites: []string{"TLS_NOPE"}}, `unexpected TLS cipher suite "TLS_NOPE"`},
		{"no cipher HTTP/2 allows", TLSConfig{CertFile: e.certFile, KeyFile: e.keyFile, CipherSuites: []string{"TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"}}, "HTTP/2-required AES_128_GCM_SHA256"},
	} {
		dir := t.TempDir()
		s, err := New(context.Background(), Config{DataDir: dir, OpenBackend: sqliteIn(dir), ListenClientURLs: []string{"https://127.0.0.1:0"}, TLS: tt.tls, Logger: testLogger(t)})
		if err == nil {
			s.Close()
			t.Errorf("%s: started", tt.name)
			continue
		}
		if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %q, want it to contain %q", tt.name, err, tt.want)
		}
	}
}

// TestTLSVersionsAndCiphers: --tls-min-version, --tls-max-version and
// --cipher-suites bound what a client can negotiate.
func TestTLSVersionsAndCiphers(t *testing.T) {
	e := newTLSEnv(t)
	base := TLSConfig{CertFile: e.certFile, KeyFile: e.keyFile}
	dial := func(addr string, tc *tls.Config) (tls.ConnectionState, error) {
		c, err := tls.Dial("tcp", addr, tc)
		if err != nil {
			return tls.ConnectionState{}, err
		}
		defer c.Close()
		return c.ConnectionState(), nil
	}

	only13 := base
	only13.MinVersion = "TLS1.3"
	_, addr := startTLSServer(t, Config{TLS: only13})
	tc := e.client(t, nil)
	tc.MaxVersion = tls.VersionTLS12
	if _, err := dial(addr, tc); err == nil {
		t.Error("--tls-min-version TLS1.3 served a TLS 1.2 client")
	}

	only12 := base
	only12.MaxVersion = "TLS1.2"
	only12.CipherSuites = []string{"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"}
	_, addr = startTLSServer(t, Config{TLS: only12})
	st, err := dial(addr, e.client(t, nil))
	if err != nil || st.Version != tls.VersionTLS12 || st.CipherSuite != tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 {
		t.Errorf("--tls-max-version TLS1.2 with one cipher: version %x cipher %x %v", st.Version, st.CipherSuite, err)
	}
	tc = e.client(t, nil)
	tc.CipherSuites = []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384}
	if _, err := dial(addr, tc); err == nil {
		t.Error("a cipher outside --cipher-suites was negotiated")
	}
}

// TestAutoTLS: --auto-tls serves a self-signed certificate written in the
// data dir, the same one after a restart, and (as etcd, which replaces its
// TLS settings with the generated ones) asks no client certificate even
// with ClientCertAuth.
func TestAutoTLS(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{DataDir: dir, TLS: TLSConfig{AutoTLS: true, ClientCertAuth: true}}
	s, addr := startTLSServer(t, cfg)
	for _, f := range []string{"cert.pem", "key.pem"} {
		if _, err := os.Stat(filepath.Join(dir, "fixtures", "client", f)); err != nil {
			t.Fatalf("auto-tls file: %v", err)
		}
	}
	insecureTLS := &tls.Config{InsecureSkipVerify: true}
	first := peerSerial(t, addr, insecureTLS)
	if status, _, err := httpsGet(addr, insecureTLS, true, "/health"); err != nil || status != http.StatusOK {
		t.Fatalf("auto-tls /health without a client certificate: %d %v", status, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_, addr = startTLSServer(t, cfg)
	if again := peerSerial(t, addr, insecureTLS); again != first {
		t.Fatalf("auto-tls made a new certificate at restart: %s, was %s", again, first)
	}
}

// TestMaxConcurrentStreams: --max-concurrent-streams bounds the streams of
// one connection, on a plain port (gRPC's transport) and over TLS
// (net/http's HTTP/2 server), as on etcd.
func TestMaxConcurrentStreams(t *testing.T) {
	e := newTLSEnv(t)
	s, addr := startTLSServer(t, Config{TLS: e.mTLS(), MaxConcurrentStreams: 2, ListenClientURLs: []string{"http://127.0.0.1:0"}})
	for _, target := range []struct {
		name  string
		addr  string
		creds credentials.TransportCredentials
	}{
		{"tls", addr, credentials.NewTLS(e.client(t, e.good))},
		{"plain", s.Addrs()[1].String(), insecure.NewCredentials()},
	} {
		conn, err := grpc.NewClient(target.addr, grpc.WithTransportCredentials(target.creds))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		kv := pb.NewKVClient(conn)
		if _, err := kv.Range(ctx, &pb.RangeRequest{Key: []byte("a")}); err != nil {
			t.Fatalf("%s: range: %v", target.name, err)
		}
		wctx, wcancel := context.WithCancel(ctx)
		for range 2 {
			w, err := pb.NewWatchClient(conn).Watch(wctx)
			if err != nil {
				t.Fatalf("%s: watch: %v", target.name, err)
			}
			w.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{Key: []byte("w")}}})
			if _, err := w.Recv(); err != nil {
				t.Fatalf("%s: watch created: %v", target.name, err)
			}
		}
		short, scancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, err = kv.Range(short, &pb.RangeRequest{Key: []byte("a")})
		scancel()
		if err == nil {
			t.Errorf("%s: a third stream was served with --max-concurrent-streams 2", target.name)
		}
		wcancel()
		if _, err := kv.Range(ctx, &pb.RangeRequest{Key: []byte("a")}, grpc.WaitForReady(true)); err != nil {
			t.Errorf("%s: range after the watches ended: %v", target.name, err)
		}
	}
}

func TestKeepaliveOptions(t *testing.T) {
	if n := len(keepaliveOptions(Config{}.withDefaults())); n != 2 {
		t.Errorf("defaults: %d keepalive options, want enforcement and server pings", n)
	}
	if n := len(keepaliveOptions(Config{GRPCKeepAliveMinTime: -1, GRPCKeepAliveInterval: -1}.withDefaults())); n != 0 {
		t.Errorf("disabled: %d keepalive options", n)
	}
}

// TestTLSUnixs: a unixs:// socket serves TLS with the same checks.
func TestTLSUnixs(t *testing.T) {
	e := newTLSEnv(t)
	sock := filepath.Join(t.TempDir(), "kite.sock")
	mustStartServer(t, Config{TLS: e.mTLS(), ListenClientURLs: []string{"unixs://" + sock}})
	get := func(cert *tlstest.Cert) error {
		tc := e.client(t, cert)
		tc.ServerName = "localhost"
		tr := &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true, DisableKeepAlives: true,
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "unix", sock)
			}}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("https://localhost/health")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
	if err := get(e.good); err != nil {
		t.Errorf("unixs with a good certificate: %v", err)
	}
	if err := get(nil); err == nil {
		t.Error("unixs served a client without a certificate")
	}
}

// TestTLSPEMCRL: the CRL is read as DER, as etcd reads it; a PEM file fails
// every client that shows a certificate, as it does on etcd (the same
// code: etcd's transport package).
func TestTLSPEMCRL(t *testing.T) {
	e := newTLSEnv(t)
	pemCRL := tlstest.Write(t, e.dir, "crl.pem", pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: e.ca.CRL(t, e.revoked)}))
	cfg := e.mTLS()
	cfg.CRLFile = pemCRL
	_, addr := startTLSServer(t, Config{TLS: cfg})
	if _, _, err := httpsGet(addr, e.client(t, e.good), false, "/health"); err == nil {
		t.Fatal("a good certificate was served with a PEM CRL file")
	}
}
