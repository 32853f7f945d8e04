package k8s

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// KITE_K8S_TLS=1 runs the suite over mutual TLS, as kube-apiserver talks to
// etcd in production: every kite serves https with --client-cert-auth and
// a certificate of a CA made here, and the suite's client presents its
// own certificate of that CA.

// k8sTLS is the PKI of a TLS run: files for kite, a config for clients.
type k8sTLS struct {
	caFile, certFile, keyFile string
	client                    *tls.Config
}

// kiteFlags are the TLS flags every kite of the run gets.
func (p *k8sTLS) kiteFlags() []string {
	return []string{"--cert-file", p.certFile, "--key-file", p.keyFile,
		"--trusted-ca-file", p.caFile, "--client-cert-auth"}
}

// newK8sTLS writes a CA, a server certificate for 127.0.0.1 and a client
// certificate into dir.
func newK8sTLS(dir string) (*k8sTLS, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kite k8s test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	issue := func(serial int64, cn string, usage x509.ExtKeyUsage) ([]byte, *ecdsa.PrivateKey, error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		return der, key, err
	}
	write := func(name, typ string, der []byte) (string, error) {
		path := filepath.Join(dir, name)
		return path, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
	}
	keyDER := func(k *ecdsa.PrivateKey) []byte {
		b, _ := x509.MarshalECPrivateKey(k)
		return b
	}
	p := &k8sTLS{}
	srvDER, srvKey, err := issue(2, "kite", x509.ExtKeyUsageServerAuth)
	if err != nil {
		return nil, err
	}
	cliDER, cliKey, err := issue(3, "kube-apiserver", x509.ExtKeyUsageClientAuth)
	if err != nil {
		return nil, err
	}
	for _, f := range []struct {
		dst       *string
		name, typ string
		der       []byte
	}{
		{&p.caFile, "ca.pem", "CERTIFICATE", caDER},
		{&p.certFile, "server.pem", "CERTIFICATE", srvDER},
		{&p.keyFile, "server-key.pem", "EC PRIVATE KEY", keyDER(srvKey)},
	} {
		if *f.dst, err = write(f.name, f.typ, f.der); err != nil {
			return nil, fmt.Errorf("write %s: %w", f.name, err)
		}
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	p.client = &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{{Certificate: [][]byte{cliDER}, PrivateKey: cliKey}}}
	return p, nil
}
