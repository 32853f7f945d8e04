package server

import (
	"crypto/tls"
	"net"

	"github.com/soheilhy/cmux"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// tlsAuthInfo are gRPC transport credentials that do no handshake of their
// own (kite's listeners terminate TLS before cmux hands the connection to
// gRPC) but tell gRPC what the TLS handshake established, so a handler
// sees the client's verified certificate in its peer information, as on
// etcd, whose gRPC server holds the TLS credentials itself. etcd's auth
// store reads the certificate's common name from there: with
// --client-cert-auth it is the user (AuthInfoFromTLS).
type tlsAuthInfo struct {
	credentials.TransportCredentials // insecure: for plain connections
}

func newTLSAuthInfo() credentials.TransportCredentials {
	return tlsAuthInfo{insecure.NewCredentials()}
}

func (c tlsAuthInfo) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	if st, ok := tlsState(conn); ok {
		return conn, credentials.TLSInfo{State: st,
			CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}, nil
	}
	return c.TransportCredentials.ServerHandshake(conn)
}

func (c tlsAuthInfo) Clone() credentials.TransportCredentials {
	return tlsAuthInfo{c.TransportCredentials.Clone()}
}

// tlsState finds the TLS connection under the wrappers a client connection
// passes through (connection tracking, cmux).
func tlsState(conn net.Conn) (tls.ConnectionState, bool) {
	for range 8 {
		switch c := conn.(type) {
		case *tls.Conn:
			return c.ConnectionState(), true
		case *cmux.MuxConn:
			conn = c.Conn
		case *trackedConn:
			conn = c.Conn
		default:
			return tls.ConnectionState{}, false
		}
	}
	return tls.ConnectionState{}, false
}
