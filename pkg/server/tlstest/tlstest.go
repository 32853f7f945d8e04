// Package tlstest makes the certificates TLS tests need, with crypto/x509
// and no files of its own: a CA, server and client certificates it signs
// (valid, expired, for any names), a CRL revoking some of them, and PEM
// files of each in a directory.
package tlstest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority.
type CA struct {
	Cert *x509.Certificate
	key  crypto.Signer
	// PEM is the CA certificate, for a trusted CA file or a RootCAs pool.
	PEM []byte
}

// Cert is a certificate with its key.
type Cert struct {
	X509    *x509.Certificate
	CertPEM []byte
	KeyPEM  []byte
}

// TLS returns the certificate for a tls.Config.
func (c *Cert) TLS(tb testing.TB) tls.Certificate {
	tb.Helper()
	pair, err := tls.X509KeyPair(c.CertPEM, c.KeyPEM)
	if err != nil {
		tb.Fatalf("key pair: %v", err)
	}
	return pair
}

// Options describe a certificate to issue. The zero value is a client
// certificate valid for an hour.
type Options struct {
	CommonName string
	// Server makes a server certificate (ExtKeyUsageServerAuth) for
	// 127.0.0.1, ::1 and localhost; otherwise it is a client certificate.
	Server bool
	// ServerOnly, with Server, leaves out client authentication: the
	// certificate cannot authenticate a client.
	ServerOnly bool
	// Expired makes a certificate that expired an hour ago.
	Expired bool
	// DNSNames and IPs are extra subject alternative names.
	DNSNames []string
	IPs      []net.IP
}

func newKey(tb testing.TB) *ecdsa.PrivateKey {
	tb.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatalf("generate key: %v", err)
	}
	return k
}

func serial(tb testing.TB) *big.Int {
	tb.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		tb.Fatalf("serial: %v", err)
	}
	return n
}

// NewCA makes a self-signed CA valid for a day.
func NewCA(tb testing.TB, name string) *CA {
	tb.Helper()
	key := newKey(tb)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(tb),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatalf("create CA: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatalf("parse CA: %v", err)
	}
	return &CA{Cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Issue signs a new certificate.
func (ca *CA) Issue(tb testing.TB, o Options) *Cert {
	tb.Helper()
	key := newKey(tb)
	tmpl := &x509.Certificate{
		SerialNumber: serial(tb),
		Subject:      pkix.Name{CommonName: o.CommonName},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		DNSNames:     o.DNSNames,
		IPAddresses:  o.IPs,
	}
	if o.Server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
		if o.ServerOnly {
			tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		}
		tmpl.DNSNames = append(tmpl.DNSNames, "localhost")
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.IPv4(127, 0, 0, 1), net.IPv6loopback)
	}
	if o.Expired {
		tmpl.NotBefore = time.Now().Add(-2 * time.Hour)
		tmpl.NotAfter = time.Now().Add(-time.Hour)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		tb.Fatalf("issue %q: %v", o.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatalf("parse %q: %v", o.CommonName, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		tb.Fatalf("marshal key: %v", err)
	}
	return &Cert{
		X509:    cert,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}
}

// CRL returns a DER revocation list of ca revoking certs: DER is what
// etcd's --client-crl-file reads (x509.ParseRevocationList).
func (ca *CA) CRL(tb testing.TB, certs ...*Cert) []byte {
	tb.Helper()
	var entries []x509.RevocationListEntry
	for _, c := range certs {
		entries = append(entries, x509.RevocationListEntry{SerialNumber: c.X509.SerialNumber, RevocationTime: time.Now().Add(-time.Minute)})
	}
	der, err := x509.CreateRevocationList(rand.Reader, &x509.RevocationList{
		Number:                    big.NewInt(time.Now().UnixNano()),
		ThisUpdate:                time.Now().Add(-time.Minute),
		NextUpdate:                time.Now().Add(24 * time.Hour),
		RevokedCertificateEntries: entries,
	}, ca.Cert, ca.key)
	if err != nil {
		tb.Fatalf("create CRL: %v", err)
	}
	return der
}

// Pool is a cert pool holding the CAs, for a client's RootCAs.
func Pool(cas ...*CA) *x509.CertPool {
	p := x509.NewCertPool()
	for _, ca := range cas {
		p.AddCert(ca.Cert)
	}
	return p
}

// Write writes data to dir/name (0600) and returns the path.
func Write(tb testing.TB, dir, name string, data []byte) string {
	tb.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		tb.Fatalf("write %s: %v", p, err)
	}
	return p
}

// Replace writes data to dir/name through a temporary file and a rename,
// so a reader sees the old file or the new one, never a torn one (how
// certificate managers rotate files).
func Replace(tb testing.TB, dir, name string, data []byte) {
	tb.Helper()
	tmp := Write(tb, dir, "."+name+".tmp", data)
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		tb.Fatalf("rename %s: %v", tmp, err)
	}
}
