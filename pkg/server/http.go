package server

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/version"

	"github.com/kite-db/kite/pkg/mvcc"
)

// healthTimeout bounds the read a health check makes.
const healthTimeout = 5 * time.Second

// healthResult is etcd's /health answer.
type healthResult struct {
	Health string `json:"health"`
	Reason string `json:"reason"`
}

// newHTTPHandler serves what etcd serves over HTTP/1 on a client port:
// /health (JSON), /livez and /readyz (plain "ok"), /version (JSON) and
// /metrics (prometheus), and with enablePprof net/http/pprof under
// /debug/pprof/ as etcd --enable-pprof does. etcd's JSON gRPC gateway
// (/v3/...) is not served.
func newHTTPHandler(log *slog.Logger, store *mvcc.Store, hdr *header, reg *prometheus.Registry, gatherer prometheus.Gatherer, enablePprof bool) http.Handler {
	h := &httpHandlers{log: log, store: store, hdr: hdr}
	mux := http.NewServeMux()
	mux.HandleFunc("/health", h.health)
	mux.HandleFunc("/livez", h.livez)
	mux.HandleFunc("/readyz", h.readyz)
	mux.HandleFunc("/version", h.version)
	mux.Handle("/metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{Registry: reg}))
	if enablePprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

type httpHandlers struct {
	log   *slog.Logger
	store *mvcc.Store
	hdr   *header
}

// check is etcd's health check: a member that knows no leader is
// unhealthy, so is one with an active alarm (except those named in
// ?exclude=), then a read must succeed: linearizable, as etcd's, unless
// ?serializable=true.
func (h *httpHandlers) check(r *http.Request) healthResult {
	ctx, cancel := context.WithTimeout(r.Context(), healthTimeout)
	defer cancel()
	if h.hdr.status().Leader == 0 {
		return healthResult{Health: "false", Reason: "RAFT NO LEADER"}
	}
	excluded := map[string]bool{}
	for _, a := range r.URL.Query()["exclude"] {
		excluded[a] = true
	}
	alarms, err := h.store.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_GET})
	if err != nil {
		return healthResult{Health: "false", Reason: fmt.Sprintf("ALARM LIST FAILED: %v", err)}
	}
	for _, a := range alarms.Alarms {
		if excluded[a.Alarm.String()] {
			continue
		}
		switch a.Alarm {
		case pb.AlarmType_NOSPACE:
			return healthResult{Health: "false", Reason: "ALARM NOSPACE"}
		case pb.AlarmType_CORRUPT:
			return healthResult{Health: "false", Reason: "ALARM CORRUPT"}
		default:
			return healthResult{Health: "false", Reason: "ALARM UNKNOWN"}
		}
	}
	if err := h.read(ctx, r.URL.Query().Get("serializable") == "true"); err != nil {
		return healthResult{Health: "false", Reason: fmt.Sprintf("QGET ERROR:%v", err)}
	}
	return healthResult{Health: "true"}
}

// read is the probe etcd uses: a range of the key "health".
func (h *httpHandlers) read(ctx context.Context, serializable bool) error {
	_, err := h.store.Range(ctx, &pb.RangeRequest{Key: []byte("health"), Serializable: serializable})
	return err
}

func (h *httpHandlers) health(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
		return
	}
	res := h.check(r)
	body, _ := json.Marshal(res)
	if res.Health != "true" {
		h.log.WarnContext(r.Context(), "/health error", "output", string(body))
		http.Error(w, string(body), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(body)
}

// livez answers as long as the process serves HTTP: a stuck store shows in
// readyz, and restarting the process would not fix a database problem.
func (h *httpHandlers) livez(w http.ResponseWriter, r *http.Request) {
	writeProbe(w, r, nil)
}

// readyz: the member can serve reads.
func (h *httpHandlers) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), healthTimeout)
	defer cancel()
	writeProbe(w, r, map[string]error{"serializable_read": h.read(ctx, true)})
}

// writeProbe writes a kube-style probe answer: "ok", or with ?verbose one
// "[+]name ok" / "[-]name failed: reason" line per check.
func writeProbe(w http.ResponseWriter, r *http.Request, checks map[string]error) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	failed := false
	var lines string
	for name, err := range checks {
		if err != nil {
			failed = true
			lines += fmt.Sprintf("[-]%s failed: %v\n", name, err)
		} else {
			lines += fmt.Sprintf("[+]%s ok\n", name)
		}
	}
	_, verbose := r.URL.Query()["verbose"]
	switch {
	case failed:
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "%s%s check failed\n", lines, r.URL.Path[1:])
	case verbose:
		fmt.Fprintf(w, "%s%s check passed\n", lines, r.URL.Path[1:])
	default:
		fmt.Fprint(w, "ok")
	}
}

// version answers etcd's /version document.
func (h *httpHandlers) version(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
		return
	}
	body, _ := json.Marshal(map[string]string{
		"etcdserver":  version.Version,
		"etcdcluster": version.Cluster(version.Version) + ".0",
		"storage":     storageVersion(),
	})
	w.Header().Set("Content-Type", "application/json")
	w.Write(body)
}
