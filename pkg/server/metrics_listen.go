package server

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kite-db/kite/pkg/mvcc"
)

// metricsListeners are etcd's --listen-metrics-urls: plain HTTP listeners
// that serve /metrics and the health probes only, so that a scraper or a
// kubelet needs no access to the client port (and no client certificate
// when that port serves TLS).
type metricsListeners struct {
	lns  []net.Listener
	urls []string
	srv  *http.Server
}

// listenMetrics binds every metrics URL; on failure nothing stays bound.
func listenMetrics(ctx context.Context, urls []string) (*metricsListeners, error) {
	m := &metricsListeners{}
	for _, u := range urls {
		l, err := listen(ctx, u)
		if err != nil {
			m.close()
			return nil, fmt.Errorf("listen metrics url: %w", err)
		}
		m.lns = append(m.lns, l)
		m.urls = append(m.urls, boundURL(u, l.Addr()))
	}
	return m, nil
}

// newMetricsHandler serves what etcd serves on a metrics URL, with the
// handlers of the client port's HTTP side (http.go).
func newMetricsHandler(log *slog.Logger, store *mvcc.Store, hdr *header, reg *prometheus.Registry, gatherer prometheus.Gatherer) http.Handler {
	h := &httpHandlers{log: log, store: store, hdr: hdr}
	mux := http.NewServeMux()
	mux.HandleFunc("/health", h.health)
	mux.HandleFunc("/livez", h.livez)
	mux.HandleFunc("/readyz", h.readyz)
	mux.Handle("/metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{Registry: reg}))
	return mux
}

// start serves h on every listener through s.serve (errors reach Err).
func (m *metricsListeners) start(s *Server, h http.Handler) {
	if len(m.lns) == 0 {
		return
	}
	m.srv = &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Minute,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	for i, l := range m.lns {
		s.serve("metrics", m.urls[i], func() error { return m.srv.Serve(l) })
		s.log.Info("serving metrics", "address", m.urls[i])
	}
}

// shutdown stops serving, letting scrapes in flight finish until ctx ends.
func (m *metricsListeners) shutdown(ctx context.Context) {
	if m == nil {
		return
	}
	if m.srv != nil {
		if err := m.srv.Shutdown(ctx); err != nil {
			m.srv.Close()
		}
	}
	m.close()
}

func (m *metricsListeners) close() {
	if m == nil {
		return
	}
	for _, l := range m.lns {
		l.Close()
	}
}
