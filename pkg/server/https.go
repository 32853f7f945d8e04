package server

import (
	"crypto/tls"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc"
)

// On a TLS client URL etcd 3.7.3 does not split connections by protocol
// after the handshake: one net/http server takes every TLS connection
// (HTTP/1.1, or HTTP/2 chosen by ALPN) and hands each HTTP/2 request whose
// content type is gRPC to the gRPC server (grpc.Server.ServeHTTP), every
// other request to the HTTP endpoints (embed/serve.go, grpcHandlerFunc).
// kite does the same, so a TLS client sees what it sees on etcd: curl, which
// negotiates HTTP/2, gets /health and /metrics on the gRPC port, and the
// HTTP/2 connection rules are net/http's (MaxConcurrentStreams as
// configured, no gRPC keepalive enforcement) on etcd as on kite. Plain
// http:// and unix:// URLs keep cmux and gRPC's own transport (server.go),
// as etcd's insecure listeners do.

// newTLSHTTPServer builds the server of every TLS listener: gRPC and the
// HTTP endpoints on one net/http server.
func newTLSHTTPServer(log *slog.Logger, gs *grpc.Server, endpoints http.Handler, tlsConfig *tls.Config, maxStreams uint32) *http.Server {
	return &http.Server{
		Handler:           grpcHandlerFunc(gs, endpoints),
		TLSConfig:         tlsConfig, // its "h2" NextProtos turns HTTP/2 on
		ReadHeaderTimeout: 5 * time.Minute,
		// net/http replaces a limit above math.MaxInt32 with its default
		// (250); etcd clamps, so the default stays unlimited.
		HTTP2: &http.HTTP2Config{MaxConcurrentStreams: int(min(maxStreams, math.MaxInt32))},
		// Client mistakes (bad requests, resets) are not server errors.
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
}

// grpcHandlerFunc sends gRPC requests to gs and the rest to other, by the
// rule etcd uses.
func grpcHandlerFunc(gs *grpc.Server, other http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 && strings.Contains(r.Header.Get("Content-Type"), "application/grpc") {
			gs.ServeHTTP(w, r)
			return
		}
		other.ServeHTTP(w, r)
	})
}
