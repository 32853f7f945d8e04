package server

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"runtime/debug"
	"strings"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
)

// errInternal is what a client gets when a handler panics.
var errInternal = status.Error(codes.Internal, "kite: internal server error")

// services is everything registered on the gRPC server.
type services struct {
	kv          *kvServer
	watch       *watchServer
	lease       *leaseServer
	maintenance *maintenanceServer
	cluster     *clusterServer
	auth        *authServer
	health      *health.Server
}

// streamWorkers is the number of goroutines kept to run gRPC handlers.
const streamWorkers = 64

// newGRPCServer builds the gRPC server with etcd's message limits, stream
// limit and keepalive policy, a panic barrier, and prometheus metrics
// (etcd's grpc_server_* through metrics, its client byte counts through
// bytes).
func newGRPCServer(log *slog.Logger, cfg Config, metrics *grpcprom.ServerMetrics, bytes stats.Handler, svc services) *grpc.Server {
	opts := []grpc.ServerOption{
		grpc.StatsHandler(bytes),
		// Client certificates reach the handlers (authtls.go).
		grpc.Creds(newTLSAuthInfo()),
		grpc.ChainUnaryInterceptor(metrics.UnaryServerInterceptor(), recoverUnary(log), slowUnary(log, cfg.WarningApplyDuration), learnerUnary(svc.cluster.hdr), authUnary(svc.auth.authz)),
		grpc.ChainStreamInterceptor(metrics.StreamServerInterceptor(), recoverStream(log), learnerStream(svc.cluster.hdr), authStream(svc.auth.authz)),
		// Room above MaxRequestBytes so an oversized write reaches the
		// handler and gets etcd's ErrGRPCRequestTooLarge.
		grpc.MaxRecvMsgSize(cfg.MaxRequestBytes + grpcOverheadBytes),
		grpc.MaxSendMsgSize(math.MaxInt32),
		grpc.MaxConcurrentStreams(cfg.MaxConcurrentStreams),
		// Handlers run on long-lived workers instead of a new goroutine per
		// request: a request into SQLite (modernc's transpiled C has large
		// frames) grew a fresh goroutine's stack several times, a tenth of
		// the CPU of a get. Streams beyond the workers get a goroutine of
		// their own, as without the option.
		grpc.NumStreamWorkers(streamWorkers),
		// Watch responses arrive encoded, sharing their events' KeyValues
		// between watchers (watch_encode.go); everything else is proto.
		grpc.ForceServerCodecV2(newPassThroughCodec()),
	}
	opts = append(opts, keepaliveOptions(cfg)...)
	gs := grpc.NewServer(opts...)
	pb.RegisterKVServer(gs, svc.kv)
	pb.RegisterWatchServer(gs, svc.watch)
	pb.RegisterLeaseServer(gs, svc.lease)
	pb.RegisterClusterServer(gs, svc.cluster)
	pb.RegisterAuthServer(gs, svc.auth)
	pb.RegisterMaintenanceServer(gs, svc.maintenance)
	healthpb.RegisterHealthServer(gs, svc.health)
	metrics.InitializeMetrics(gs)
	return gs
}

// keepaliveOptions are etcd's (embed/etcd.go): pings closer than MinTime
// are refused (with no stream open, any ping is: PermitWithoutStream stays
// false), and the server pings a connection idle for Interval, closing it
// when no answer comes within Timeout. A disabled (negative) setting leaves
// gRPC's default, as etcd does with 0.
func keepaliveOptions(cfg Config) []grpc.ServerOption {
	var opts []grpc.ServerOption
	if cfg.GRPCKeepAliveMinTime > 0 {
		opts = append(opts, grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             cfg.GRPCKeepAliveMinTime,
			PermitWithoutStream: false,
		}))
	}
	if cfg.GRPCKeepAliveInterval > 0 && cfg.GRPCKeepAliveTimeout > 0 {
		opts = append(opts, grpc.KeepaliveParams(keepalive.ServerParameters{
			Time:    cfg.GRPCKeepAliveInterval,
			Timeout: cfg.GRPCKeepAliveTimeout,
		}))
	}
	return opts
}

// recoverUnary turns a panic in a handler into codes.Internal. It is the
// last line of defence: validation should already have refused any input
// that could panic, so a panic here is a bug and is logged with its stack.
func recoverUnary(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if p := recover(); p != nil {
				log.ErrorContext(ctx, "panic in gRPC handler", "method", info.FullMethod, "panic", p, "stack", string(debug.Stack()))
				resp, err = nil, errInternal
			}
		}()
		return handler(ctx, req)
	}
}

func recoverStream(log *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		defer func() {
			if p := recover(); p != nil {
				log.ErrorContext(ss.Context(), "panic in gRPC stream handler", "method", info.FullMethod, "panic", p, "stack", string(debug.Stack()))
				err = errInternal
			}
		}()
		return handler(srv, ss)
	}
}

// logStreamError logs a failed stream send or receive: at debug level when
// the client simply went away (canceled, deadline, disconnect), as a
// warning otherwise. Mirrors etcd's isClientCtxErr.
func logStreamError(ctx context.Context, log *slog.Logger, what string, err error) {
	if isClientGone(ctx, err) {
		log.DebugContext(ctx, "failed to "+what, "error", err)
		return
	}
	log.WarnContext(ctx, "failed to "+what, "error", err)
}

func isClientGone(ctx context.Context, err error) bool {
	if ctx.Err() != nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	switch st.Code() {
	case codes.Canceled, codes.DeadlineExceeded:
		return true
	case codes.Unavailable:
		msg := st.Message()
		return msg == "client disconnected" ||
			(strings.HasPrefix(msg, "stream error: ") && strings.HasSuffix(msg, "; CANCEL"))
	}
	return false
}
