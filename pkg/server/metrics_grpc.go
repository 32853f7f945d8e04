package server

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/stats"
)

// grpcBytes is etcd's etcd_network_client_grpc_{received,sent}_bytes_total.
// etcd counts them in its gRPC codec, the encoded size of each message; a
// stats.Handler sees the same sizes (Length, before compression) without
// replacing the codec.
type grpcBytes struct {
	received, sent prometheus.Counter
}

var _ stats.Handler = (*grpcBytes)(nil)

func newGRPCBytes(reg prometheus.Registerer) *grpcBytes {
	g := &grpcBytes{
		received: prometheus.NewCounter(prometheus.CounterOpts{Name: "etcd_network_client_grpc_received_bytes_total",
			Help: "The total number of bytes received from grpc clients."}),
		sent: prometheus.NewCounter(prometheus.CounterOpts{Name: "etcd_network_client_grpc_sent_bytes_total",
			Help: "The total number of bytes sent to grpc clients."}),
	}
	reg.MustRegister(g.received, g.sent)
	return g
}

func (g *grpcBytes) HandleRPC(_ context.Context, s stats.RPCStats) {
	switch p := s.(type) {
	case *stats.InPayload:
		g.received.Add(float64(p.Length))
	case *stats.OutPayload:
		g.sent.Add(float64(p.Length))
	}
}

func (g *grpcBytes) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (g *grpcBytes) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (g *grpcBytes) HandleConn(context.Context, stats.ConnStats)                       {}
