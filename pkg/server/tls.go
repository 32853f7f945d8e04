package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"path/filepath"

	"go.etcd.io/etcd/client/pkg/v3/tlsutil"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.uber.org/zap"
)

// Client TLS is etcd's, not a re-implementation of it: the settings become
// an etcd transport.TLSInfo and the listener is etcd's TLS listener, so the
// rules a client meets are the ones etcd 3.7.3 applies, among them:
//
//   - A client certificate is required and verified against TrustedCAFile
//     when TrustedCAFile is set, even without ClientCertAuth.
//   - The certificate and key files are read again on every handshake, so
//     rotated files serve new connections without a restart; the trusted CA
//     file is read when a listener starts serving, not per handshake.
//   - The CRL file is read after every handshake and a revoked client
//     certificate (or any certificate of its chain) closes the connection.
//   - A handshake must end within 10 s and runs on a goroutine of its own,
//     so a slow or garbage-sending client delays nobody else.
//   - TLS 1.2 is the minimum unless MinVersion says TLS1.3.

// DefaultSelfSignedCertValidity is etcd's --self-signed-cert-validity, in
// years.
const DefaultSelfSignedCertValidity = 1

// TLSConfig is the TLS of the https:// and unixs:// client URLs, with the
// meaning of etcd's flags of the same names.
type TLSConfig struct {
	// CertFile and KeyFile are the server's certificate and key, PEM
	// (--cert-file, --key-file).
	CertFile string
	KeyFile  string
	// TrustedCAFile holds the CAs that sign client certificates
	// (--trusted-ca-file). Set, it makes a client certificate mandatory, as
	// in etcd.
	TrustedCAFile string
	// ClientCertAuth requires a verified client certificate
	// (--client-cert-auth).
	ClientCertAuth bool
	// CRLFile is a certificate revocation list in DER form, as etcd reads
	// it (--client-crl-file); it is read after every handshake.
	CRLFile string
	// AllowedHostnames, if set, are the only SAN names or IPs a client
	// certificate may carry (--client-cert-allowed-hostname).
	AllowedHostnames []string
	// CipherSuites names the TLS 1.2 cipher suites allowed, Go's names
	// (--cipher-suites); empty: Go's defaults.
	CipherSuites []string
	// MinVersion and MaxVersion are "TLS1.2", "TLS1.3" or "" (min: TLS1.2,
	// max: Go's highest) (--tls-min-version, --tls-max-version).
	MinVersion string
	MaxVersion string
	// AutoTLS serves a self-signed certificate generated in
	// DataDir/fixtures/client when no CertFile and KeyFile are given
	// (--auto-tls); as in etcd it then verifies no client certificate.
	AutoTLS bool
	// SelfSignedCertValidity is the validity of that certificate in years
	// (default 1).
	SelfSignedCertValidity uint
}

func (t TLSConfig) withDefaults() TLSConfig {
	if t.SelfSignedCertValidity == 0 {
		t.SelfSignedCertValidity = DefaultSelfSignedCertValidity
	}
	return t
}

// empty is etcd's TLSInfo.Empty: neither certificate nor key given.
func (t TLSConfig) empty() bool { return t.CertFile == "" && t.KeyFile == "" }

// validate makes etcd's start-up checks, with etcd's messages: TLS versions
// and cipher suites are checked even when no URL uses TLS.
func (t TLSConfig) validate(listenURLs []string) error {
	minV, err := tlsutil.GetTLSVersion(t.MinVersion)
	if err != nil {
		return fmt.Errorf("--tls-min-version: %w", err)
	}
	maxV, err := tlsutil.GetTLSVersion(t.MaxVersion)
	if err != nil {
		return fmt.Errorf("--tls-max-version: %w", err)
	}
	if maxV != 0 && minV > maxV {
		return fmt.Errorf("min version (%s) is greater than max version (%s)", t.MinVersion, t.MaxVersion)
	}
	if minV == tls.VersionTLS13 && len(t.CipherSuites) > 0 {
		return errors.New("cipher suites cannot be configured when only TLS1.3 is enabled")
	}
	if _, err := tlsutil.GetCipherSuites(t.CipherSuites); err != nil {
		return fmt.Errorf("--cipher-suites: %w", err)
	}
	for _, u := range listenURLs {
		if _, _, secure, _ := parseListenURL(u); secure && t.empty() && !t.AutoTLS {
			return fmt.Errorf("TLS key/cert (--cert-file, --key-file) must be provided for client url %s with HTTPS scheme", u)
		}
	}
	return nil
}

// anySecure reports whether a listen URL serves TLS.
func anySecure(listenURLs []string) bool {
	for _, u := range listenURLs {
		if _, _, secure, _ := parseListenURL(u); secure {
			return true
		}
	}
	return false
}

// clientTLSInfo builds etcd's TLSInfo for the client listeners, generating
// the self-signed certificate first with AutoTLS, and its server tls.Config,
// which checks that the certificate, key and CA files load (etcd fails its
// start on them too).
func clientTLSInfo(log *slog.Logger, t TLSConfig, dataDir string, listenURLs []string) (*transport.TLSInfo, *tls.Config, error) {
	info := &transport.TLSInfo{
		CertFile:         t.CertFile,
		KeyFile:          t.KeyFile,
		TrustedCAFile:    t.TrustedCAFile,
		ClientCertAuth:   t.ClientCertAuth,
		CRLFile:          t.CRLFile,
		AllowedHostnames: t.AllowedHostnames,
	}
	switch {
	case t.AutoTLS && t.empty():
		self, err := selfCert(log, t, dataDir, listenURLs)
		if err != nil {
			return nil, nil, err
		}
		// etcd replaces the whole TLSInfo with the self-signed one: the CA,
		// client-cert-auth and CRL settings no longer apply.
		info = self
	case t.AutoTLS:
		log.Warn("ignoring client auto TLS since certs given")
	}
	info.CipherSuites, _ = tlsutil.GetCipherSuites(t.CipherSuites) // validated
	info.MinVersion, _ = tlsutil.GetTLSVersion(t.MinVersion)
	info.MaxVersion, _ = tlsutil.GetTLSVersion(t.MaxVersion)
	// etcd's TLSInfo logs through zap; kite logs rejections itself.
	info.Logger = zap.NewNop()
	info.HandshakeFailure = handshakeFailureLogger(log)
	cfg, err := info.ServerConfig()
	if err != nil {
		return nil, nil, fmt.Errorf("client TLS (%s): %w", info, err)
	}
	if err := checkHTTP2Ciphers(cfg); err != nil {
		return nil, nil, err
	}
	return info, cfg, nil
}

// checkHTTP2Ciphers refuses at start what net/http's HTTP/2 server refuses
// when it starts serving (and what makes etcd exit with "listener failed"
// right after its start): a TLS 1.2 cipher list without a cipher HTTP/2
// requires. The message is net/http's.
func checkHTTP2Ciphers(cfg *tls.Config) error {
	if cfg.CipherSuites == nil || cfg.MinVersion >= tls.VersionTLS13 {
		return nil
	}
	for _, cs := range cfg.CipherSuites {
		if cs == tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 || cs == tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 {
			return nil
		}
	}
	return errors.New("--cipher-suites: http2: TLSConfig.CipherSuites is missing an HTTP/2-required AES_128_GCM_SHA256 cipher (need at least one of TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 or TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256)")
}

// warnIgnoredTLS repeats etcd's warnings for TLS settings a plain URL
// ignores.
func warnIgnoredTLS(log *slog.Logger, t TLSConfig, listenURLs []string) {
	for _, u := range listenURLs {
		if _, _, secure, _ := parseListenURL(u); secure {
			continue
		}
		if !t.empty() {
			log.Warn("scheme is http or unix while key and cert files are present; ignoring key and cert files", "client-url", u)
		}
		if t.ClientCertAuth {
			log.Warn("scheme is http or unix while --client-cert-auth is enabled; ignoring client cert auth for this URL", "client-url", u)
		}
	}
}

// selfCert is etcd's --auto-tls: a certificate for the listen URLs' hosts in
// DataDir/fixtures/client, generated once and reused at the next start.
func selfCert(log *slog.Logger, t TLSConfig, dataDir string, listenURLs []string) (*transport.TLSInfo, error) {
	var hosts []string
	for _, raw := range listenURLs {
		if u, err := url.Parse(raw); err == nil {
			hosts = append(hosts, u.Host)
		}
	}
	dir := filepath.Join(dataDir, "fixtures", "client")
	info, err := transport.SelfCert(zap.NewNop(), dir, hosts, t.SelfSignedCertValidity)
	if err != nil {
		return nil, fmt.Errorf("auto-tls: generate a self-signed certificate in %s: %w", dir, err)
	}
	log.Warn("serving clients with a self-signed certificate (--auto-tls)", "cert-file", info.CertFile, "key-file", info.KeyFile)
	return &info, nil
}

// newTLSListener wraps l in etcd's TLS listener: handshakes run
// concurrently, bounded in time, and a connection reaches Accept only once
// its handshake and CRL check passed.
func newTLSListener(l net.Listener, info *transport.TLSInfo) (net.Listener, error) {
	tl, err := transport.NewTLSListener(l, info)
	if err != nil {
		return nil, fmt.Errorf("tls listener on %s: %w", l.Addr(), err)
	}
	return tl, nil
}

// handshakeFailureLogger logs a refused TLS client as etcd does: a warning
// naming the peer and its certificate, at debug level for a plain EOF (load
// balancer probes that connect and hang up) and for a handshake cut by the
// listener's close (the end of the opening phase, shutdown).
func handshakeFailureLogger(log *slog.Logger) func(*tls.Conn, error) {
	return func(c *tls.Conn, err error) {
		level := slog.LevelWarn
		if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
			level = slog.LevelDebug
		}
		st := c.ConnectionState()
		attrs := []any{"remote-addr", c.RemoteAddr().String(), "server-name", st.ServerName, "error", err}
		if len(st.PeerCertificates) > 0 {
			cert := st.PeerCertificates[0]
			ips := make([]string, len(cert.IPAddresses))
			for i, ip := range cert.IPAddresses {
				ips[i] = ip.String()
			}
			attrs = append(attrs, "ip-addresses", ips, "dns-names", cert.DNSNames)
		}
		log.Log(context.Background(), level, "rejected connection on client endpoint", attrs...)
	}
}
