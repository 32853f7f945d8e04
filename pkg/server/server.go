package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/soheilhy/cmux"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/kite-db/kite/pkg/mvcc"
)

// gracefulStopTimeout bounds how long Close lets in-flight RPCs finish
// before cutting the remaining streams (watches never finish on their own).
const gracefulStopTimeout = 2 * time.Second

// Server is one kite member: the store, its gRPC services and the HTTP
// endpoints, served on every client listener.
type Server struct {
	cfg       Config
	log       *slog.Logger
	lock      *os.File // held while the data dir is ours
	backend   mvcc.Backend
	cluster   cluster // chosen once the backend is open (members.go)
	proposals proposalCounts
	store     *mvcc.Store
	grpc      *grpc.Server
	http      *http.Server
	health    *health.Server
	compactor *compactor
	listeners []*trackingListener
	// views hand each listener's connections to cmux once the store is
	// open (opening.go); urls and secure (TLS) are the listeners' client
	// URLs; all in the order of listeners.
	views  []*handoffView
	urls   []string
	secure []bool
	// tlsInfo and tlsConfig are etcd's client TLS (tls.go), set when a
	// listener serves TLS; httpTLS serves gRPC and HTTP on those listeners
	// (https.go).
	tlsInfo   *transport.TLSInfo
	tlsConfig *tls.Config
	httpTLS   *http.Server
	// metrics serves --listen-metrics-urls (metrics_listen.go);
	// metricsHandler is what it serves.
	metrics        *metricsListeners
	metricsHandler http.Handler

	// errc receives the first serving error; Err returns it.
	errc chan error
	// stopping is closed by Close to end long-lived streams.
	stopping chan struct{}
	wg       sync.WaitGroup

	mu      sync.Mutex // guards started and closed
	started bool
	closed  bool
}

// New opens the data directory, the database and the store, and binds every
// client listener (so a port in use fails here, and Addrs is known before
// Start). Nothing is served until Start.
func New(ctx context.Context, cfg Config) (_ *Server, err error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("invalid config: %w", err)
	}
	retention, _ := cfg.compactionRetention()
	log := cfg.Logger

	s := &Server{cfg: cfg, log: log, errc: make(chan error, 1), stopping: make(chan struct{})}
	// On any failure below, release what was opened so far.
	defer func() {
		if err != nil {
			s.closeResources()
		}
	}()

	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	if s.lock, err = LockDataDir(cfg.DataDir); err != nil {
		return nil, err
	}
	warnIgnoredTLS(log, cfg.TLS, cfg.ListenClientURLs)
	if anySecure(cfg.ListenClientURLs) {
		// After the lock: --auto-tls writes its certificate in the data dir.
		if s.tlsInfo, s.tlsConfig, err = clientTLSInfo(log, cfg.TLS, cfg.DataDir, cfg.ListenClientURLs); err != nil {
			return nil, err
		}
	}
	// Bound first: a port in use fails before the storage is touched, and
	// the probes answer while it opens (opening.go).
	var handoffs []*handoff
	for _, u := range cfg.ListenClientURLs {
		l, err := listen(ctx, u)
		if err != nil {
			return nil, err
		}
		_, _, secure, _ := parseListenURL(u)
		tl := newTrackingListener(l)
		h := newHandoff(tl)
		s.listeners = append(s.listeners, tl)
		s.views = append(s.views, h.view(true))
		s.urls = append(s.urls, boundURL(u, l.Addr()))
		s.secure = append(s.secure, secure)
		handoffs = append(handoffs, h)
	}
	if s.metrics, err = listenMetrics(ctx, cfg.ListenMetricsURLs); err != nil {
		return nil, err
	}
	opening, err := startOpeningServer(handoffs, s.secure, s.tlsInfo)
	if err != nil {
		return nil, err
	}
	err = s.openStore(ctx)
	opening.stop()
	if err != nil {
		return nil, err
	}

	s.buildServers()
	s.compactor = newCompactor(log, s.store, cfg.AutoCompactionMode, retention)
	return s, nil
}

// openStore opens the storage and the store over it.
func (s *Server) openStore(ctx context.Context) (err error) {
	if s.backend, err = s.cfg.OpenBackend(ctx); err != nil {
		return fmt.Errorf("open storage: %w", err)
	}
	s.cluster = newCluster(s.cfg, s.backend, &s.proposals, func() int64 { rev, _ := s.store.Revisions(); return rev })
	s.store, err = mvcc.Open(ctx, s.backend, mvcc.Config{
		// The NOSPACE alarm this member raises names it as its headers do,
		// as etcd's names its raft ID.
		MemberID:               s.cluster.id(),
		QuotaBackendBytes:      s.cfg.QuotaBackendBytes,
		ProgressNotifyInterval: s.cfg.WatchProgressNotifyInterval,
		AuthToken:              s.cfg.AuthToken,
		AuthTokenTTL:           s.cfg.AuthTokenTTL,
		BcryptCost:             s.cfg.BcryptCost,
		ReadAheadBytes:         s.cfg.ReadAheadBytes,
		WatchRingBytes:         s.cfg.WatchRingBytes,
		Logger:                 s.log.With("component", "mvcc"),
	})
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	// A member whose replication stopped (a failed apply) must not serve
	// stale reads: the server stops with it.
	stopped := s.cluster.stopped()
	s.wg.Go(func() {
		select {
		case err := <-stopped:
			select {
			case s.errc <- fmt.Errorf("raft member stopped: %w", err):
			default:
			}
		case <-s.stopping:
		}
	})
	return nil
}

// buildServers wires the gRPC services and the HTTP handler.
func (s *Server) buildServers() {
	cfg := s.cfg
	hdr := &header{
		clusterID: s.cluster.clusterID(),
		memberID:  s.cluster.id(),
		cluster:   s.cluster,
		rev:       func() int64 { rev, _ := s.store.Revisions(); return rev },
	}
	s.health = health.NewServer()
	// One registry per Server (metrics_*.go): etcd's names, types, labels
	// and buckets, fed by this server only.
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := grpcprom.NewServerMetrics()
	reg.MustRegister(metrics, newStoreCollector(s.store, hdr, cfg.QuotaBackendBytes))
	kvm := newKVMetrics(reg, &s.proposals)
	replication := s.cluster.defaultMetrics()
	newDiskMetrics(reg, s.backend, replication != nil)
	if p, ok := s.backend.(poolStater); ok {
		reg.MustRegister(newPoolCollector(p))
	}
	if l, ok := s.backend.(listenStater); ok {
		reg.MustRegister(newListenCollector(l))
	}
	if w, ok := s.backend.(wakeStater); ok {
		reg.MustRegister(newWakeCollector(w))
	}
	gatherer := prometheus.Gatherer(reg)
	if replication != nil {
		gatherer = prometheus.Gatherers{reg, replication}
	}

	authz := &authorizer{store: s.store, clientCertAuth: cfg.TLS.ClientCertAuth}
	s.grpc = newGRPCServer(s.log, cfg, metrics, newGRPCBytes(reg), services{
		kv: &kvServer{store: s.store, hdr: hdr, maxTxnOps: cfg.MaxTxnOps, maxRequestBytes: cfg.MaxRequestBytes, metrics: kvm, authz: authz},
		watch: &watchServer{store: s.store, hdr: hdr, log: s.log.With("component", "watch"), authz: authz,
			stopping: s.stopping, fragmentBytes: cfg.MaxRequestBytes + grpcOverheadBytes, metrics: newWatchMetrics(reg),
			kvEnc: newKVEncodings()},
		lease: &leaseServer{store: s.store, hdr: hdr, log: s.log.With("component", "lease"), authz: authz,
			stopping: s.stopping, maxRequestBytes: cfg.MaxRequestBytes},
		maintenance: &maintenanceServer{store: s.store, hdr: hdr, log: s.log.With("component", "maintenance"),
			quota: cfg.QuotaBackendBytes, dataDir: cfg.DataDir},
		cluster: &clusterServer{hdr: hdr},
		auth:    &authServer{store: s.store, hdr: hdr, authz: authz},
		health:  s.health,
	})
	endpoints := newHTTPHandler(s.log.With("component", "http"), s.store, hdr, reg, gatherer, cfg.EnablePprof)
	s.http = &http.Server{
		Handler:           endpoints,
		ReadHeaderTimeout: 5 * time.Minute,
		// Client mistakes (bad requests, resets) are not server errors.
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	s.metricsHandler = newMetricsHandler(s.log.With("component", "metrics"), s.store, hdr, reg, gatherer)
	if s.tlsConfig != nil {
		s.httpTLS = newTLSHTTPServer(s.log, s.grpc, endpoints, s.tlsConfig, cfg.MaxConcurrentStreams)
	}
}

// Start serves gRPC and HTTP on every listener and returns at once. Each
// listener is split by protocol (cmux): HTTP/2 goes to gRPC, HTTP/1 to the
// health and metrics endpoints, as on an etcd client port.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("server is closed")
	}
	if s.started {
		return errors.New("server already started")
	}
	s.started = true
	for i := range s.listeners {
		u := s.urls[i]
		if s.secure[i] {
			tlsL, err := newTLSListener(s.views[i], s.tlsInfo)
			if err != nil {
				return err
			}
			s.serve("https", u, func() error { return s.httpTLS.Serve(tlsL) })
			continue
		}
		m := cmux.New(s.views[i])
		httpL := m.Match(cmux.HTTP1())
		grpcL := m.Match(cmux.HTTP2())
		s.serve("grpc", u, func() error { return s.grpc.Serve(grpcL) })
		s.serve("http", u, func() error { return s.http.Serve(httpL) })
		s.serve("cmux", u, m.Serve)
	}
	s.metrics.start(s, s.metricsHandler)
	s.compactor.start()
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	for i, u := range s.urls {
		if s.secure[i] {
			s.log.Info("serving client traffic securely", "address", u)
		} else {
			s.log.Info("serving client traffic", "address", u)
		}
	}
	return nil
}

// serve runs fn until it fails; a failure before Close is reported on errc.
func (s *Server) serve(what, url string, fn func() error) {
	s.wg.Go(func() {
		err := fn()
		s.mu.Lock()
		closed := s.closed
		s.mu.Unlock()
		if closed || err == nil || errors.Is(err, http.ErrServerClosed) ||
			errors.Is(err, grpc.ErrServerStopped) || errors.Is(err, cmux.ErrListenerClosed) ||
			errors.Is(err, net.ErrClosed) {
			return
		}
		err = fmt.Errorf("serve %s on %s: %w", what, url, err)
		select {
		case s.errc <- err:
		default:
		}
	})
}

// Err reports the first error that stopped a listener. Run uses it to stop
// the whole server when serving fails.
func (s *Server) Err() <-chan error { return s.errc }

// Addrs returns the bound address of every client listener, in the order of
// ListenClientURLs (useful with port 0).
func (s *Server) Addrs() []net.Addr {
	addrs := make([]net.Addr, len(s.listeners))
	for i, l := range s.listeners {
		addrs[i] = l.Addr()
	}
	return addrs
}

// Store returns the server's store, for embedders that want to read or write
// in-process without gRPC.
func (s *Server) Store() *mvcc.Store { return s.store }

// Close stops serving and releases everything: streams (watch, keepalive)
// end with etcd's "server stopped", in-flight unary RPCs get a moment to
// finish, then the compactor stops, the store closes (ending its goroutines)
// and the database closes. When Close returns, no goroutine of the server is
// left.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()

	s.health.Shutdown()
	// Watch and keepalive streams never end on their own: end them now so
	// the graceful stop waits only for unary calls in flight.
	close(s.stopping)
	// TLS first, as etcd: its gRPC calls run inside the net/http server,
	// whose Shutdown lets them finish; the gRPC server's graceful stop would
	// cut them.
	if s.httpTLS != nil {
		ctx, cancel := context.WithTimeout(context.Background(), gracefulStopTimeout)
		if err := s.httpTLS.Shutdown(ctx); err != nil {
			s.httpTLS.Close()
		}
		cancel()
	}
	stopped := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(gracefulStopTimeout):
		s.grpc.Stop()
		<-stopped
	}
	ctx, cancel := context.WithTimeout(context.Background(), gracefulStopTimeout)
	defer cancel()
	if err := s.http.Shutdown(ctx); err != nil {
		s.http.Close()
	}
	s.metrics.shutdown(ctx)
	for _, l := range s.listeners {
		l.Close()
		// gRPC and HTTP closed theirs; what is left was still being
		// sniffed by cmux.
		l.closeConns()
	}
	s.wg.Wait()
	return s.closeResources()
}

// closeResources stops the compactor and closes the store and the backend,
// whichever of them were opened.
func (s *Server) closeResources() error {
	var errs []error
	if s.grpc == nil {
		// Built listeners but never reached Start/Close's shutdown path.
		for _, l := range s.listeners {
			l.Close()
		}
		s.metrics.close()
	}
	s.compactor.stop()
	if s.store != nil {
		if err := s.store.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close store: %w", err))
		}
	}
	if s.backend != nil {
		if err := s.backend.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close backend: %w", err))
		}
	}
	if s.lock != nil {
		s.lock.Close() // releases the flock
	}
	return errors.Join(errs...)
}

// Run starts a server for cfg and serves until ctx is done or serving fails,
// then closes it. It is the whole life of an embedded kite in one call.
func Run(ctx context.Context, cfg Config) error {
	s, err := New(ctx, cfg)
	if err != nil {
		return err
	}
	if err := s.Start(); err != nil {
		s.Close()
		return err
	}
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-s.Err():
	}
	return errors.Join(serveErr, s.Close())
}

func addrString(a net.Addr) string {
	if a.Network() == "unix" {
		return "unix://" + a.String()
	}
	return "http://" + a.String()
}

// boundURL is a listen URL with the address it was bound to (the port
// chosen for port 0), for logs and errors.
func boundURL(raw string, a net.Addr) string {
	scheme, _, _ := strings.Cut(raw, ":")
	return scheme + "://" + a.String()
}
