package raftsql

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/etcdserver/api/rafthttp"
)

// Peer TLS, as etcd's: https peer URLs are served with the member's
// certificate (--peer-cert-file, --peer-key-file); with
// --peer-client-cert-auth a peer must present a certificate the
// --peer-trusted-ca-file CA signed (and, with --peer-cert-allowed-cn, one
// of those common names) to send raft messages or join; the member dials
// the others with the same certificate. --peer-auto-tls makes a
// self-signed certificate in <data-dir>/fixtures/peer when none is given.

// PeerTLS is the member's peer TLS settings.
type PeerTLS struct {
	Info transport.TLSInfo
	// AutoTLS and Validity (years) are etcd's --peer-auto-tls and
	// --self-signed-cert-validity.
	AutoTLS  bool
	Validity uint
}

// setupPeerTLS completes the TLS settings: a self-signed certificate for
// auto TLS, the logger etcd's transport package needs, and the refusal of
// an https peer URL without a certificate.
func (n *Node) setupPeerTLS() error {
	t := &n.cfg.PeerTLS
	t.Info.Logger = n.zlog
	if t.AutoTLS && t.Info.Empty() {
		var hosts []string
		for _, u := range n.cfg.ListenPeer {
			if pu, err := url.Parse(u); err == nil {
				hosts = append(hosts, pu.Host)
			}
		}
		info, err := transport.SelfCert(n.zlog, filepath.Join(n.cfg.DataDir, "fixtures", "peer"), hosts, max(t.Validity, 1))
		if err != nil {
			return fmt.Errorf("--peer-auto-tls: %w", err)
		}
		info.ClientCertAuth, info.TrustedCAFile, info.AllowedCNs = t.Info.ClientCertAuth, t.Info.TrustedCAFile, t.Info.AllowedCNs
		t.Info = info
	}
	secure := false
	for _, u := range append(append([]string{}, n.cfg.ListenPeer...), n.cluster.self().PeerURLs...) {
		if pu, err := url.Parse(u); err == nil && pu.Scheme == "https" {
			secure = true
		}
	}
	if secure && t.Info.Empty() {
		return errors.New("https peer URLs need --peer-cert-file and --peer-key-file (or --peer-auto-tls)")
	}
	if !t.Info.Empty() {
		n.log.Info("peer TLS", "cert", t.Info.CertFile, "trusted-ca", t.Info.TrustedCAFile,
			"client-cert-auth", t.Info.ClientCertAuth, "allowed-cn", t.Info.AllowedCNs, "auto", t.AutoTLS)
	}
	return nil
}

// listenPeer binds one --listen-peer-urls URL, with TLS for https, through
// etcd's listener (which checks client certificates, CRL and allowed CNs
// as etcd's peer listener does).
func (n *Node) listenPeer(raw string) (net.Listener, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("--listen-peer-urls %q: %w", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("--listen-peer-urls %q: want http:// or https://", raw)
	}
	if u.Scheme == "http" && !n.cfg.PeerTLS.Info.Empty() {
		n.log.Warn("scheme is HTTP while key and cert files are present; ignoring key and cert files", "peer-url", raw)
	}
	l, err := transport.NewListenerWithOpts(u.Host, u.Scheme, transport.WithTLSInfo(&n.cfg.PeerTLS.Info),
		transport.WithTimeout(rafthttp.ConnReadTimeout, rafthttp.ConnWriteTimeout))
	if err != nil {
		return nil, fmt.Errorf("listen on peer URL %s: %w", raw, err)
	}
	return l, nil
}

// newPeerClient is the HTTP client of kite's own peer requests (lease
// forwarding, HashKV, client URLs), with the member's peer certificate.
func (n *Node) newPeerClient() (*http.Client, error) {
	tr, err := transport.NewTransport(n.cfg.PeerTLS.Info, 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("peer client: %w", err)
	}
	return &http.Client{Transport: tr, Timeout: 5 * time.Second}, nil
}
