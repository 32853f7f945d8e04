package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kite-db/kite/internal/testenv"
)

// apiserver is one kube-apiserver on a storage, started and restarted on the
// same flags, keys and port.
type apiserver struct {
	bin, dir string
	port     int
	token    string
	etcd     string // --etcd-servers
	log      *slog.Logger
	logPath  string
	proc     *testenv.Process
	http     *http.Client
}

// newAPIServer writes what kube-apiserver needs besides storage: a
// service-account signing key of its own and a token file naming the
// benchmark's client a member of system:masters, so RBAC never stands in
// its way.
func newAPIServer(log *slog.Logger, bin, dir, etcd string) (*apiserver, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("kube-apiserver dir: %w", err)
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, fmt.Errorf("service-account key: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("service-account key: %w", err)
	}
	files := map[string][]byte{
		"sa.key": pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}),
		"sa.pub": pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}),
	}
	var t [24]byte
	if _, err := rand.Read(t[:]); err != nil {
		return nil, fmt.Errorf("token: %w", err)
	}
	token := hex.EncodeToString(t[:])
	files["tokens.csv"] = []byte(token + `,kube-bench,kube-bench-uid,"system:masters"` + "\n")
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return nil, fmt.Errorf("write %s: %w", name, err)
		}
	}
	port, err := testenv.FreePort()
	if err != nil {
		return nil, err
	}
	return &apiserver{
		bin: bin, dir: dir, port: port, token: token, etcd: etcd, log: log,
		logPath: filepath.Join(dir, "kube-apiserver.log"),
		http: &http.Client{
			Timeout: 10 * time.Second,
			// The serving certificate is the one kube-apiserver makes itself
			// in --cert-dir; the connection never leaves the loopback.
			Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}},
		},
	}, nil
}

// argv is run.sh's command line less its verbose logging. Admission is cut
// to what a ConfigMap meets without webhooks or quotas configured: the
// benchmark is of storage, and those plugins only cost apiserver CPU.
func (a *apiserver) argv() []string {
	return []string{a.bin,
		"--etcd-servers=" + a.etcd,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port=" + strconv.Itoa(a.port),
		"--endpoint-reconciler-type=none",
		"--cert-dir=" + filepath.Join(a.dir, "certs"),
		"--token-auth-file=" + filepath.Join(a.dir, "tokens.csv"),
		"--authorization-mode=Node,RBAC",
		"--service-account-key-file=" + filepath.Join(a.dir, "sa.pub"),
		"--service-account-signing-key-file=" + filepath.Join(a.dir, "sa.key"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range=10.96.0.0/16",
		"--disable-admission-plugins=ResourceQuota,MutatingAdmissionWebhook,ValidatingAdmissionWebhook,ValidatingAdmissionPolicy",
		"--v=1",
	}
}

// start starts kube-apiserver (again) with a fresh log and waits until its
// /readyz says ok, which it says only after its watch caches are filled
// from storage; it returns how long that took.
func (a *apiserver) start(ctx context.Context, timeout time.Duration) (time.Duration, error) {
	f, err := os.Create(a.logPath)
	if err != nil {
		return 0, fmt.Errorf("kube-apiserver log: %w", err)
	}
	defer f.Close()
	begin := time.Now()
	p, err := testenv.Start(testenv.Command{Argv: a.argv(), Out: f, NoteExit: true})
	if err != nil {
		return 0, err
	}
	a.proc = p
	a.log.Info("started kube-apiserver", "pid", p.Pid(), "port", a.port, "etcd", a.etcd)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last string
	for {
		ok, why := a.ready(ctx)
		if ok {
			return time.Since(begin), nil
		}
		last = why
		select {
		case <-p.Exited():
			return 0, fmt.Errorf("kube-apiserver exited while starting (%v); its log ends:\n%s", p.Err(), testenv.LogFileTail(a.logPath, 30))
		case <-ctx.Done():
			return 0, fmt.Errorf("kube-apiserver not ready after %s (%s): %w; its log ends:\n%s", timeout, last, ctx.Err(), testenv.LogFileTail(a.logPath, 30))
		case <-tick.C:
		}
	}
}

// ready is one GET /readyz: true when it answers 200 "ok", else what it said.
func (a *apiserver) ready(ctx context.Context) (bool, string) {
	b, code, err := a.get(ctx, "/readyz")
	if err != nil {
		return false, err.Error()
	}
	return code == http.StatusOK && strings.TrimSpace(string(b)) == "ok", fmt.Sprintf("%d %.200s", code, b)
}

func (a *apiserver) get(ctx context.Context, path string) ([]byte, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("https://127.0.0.1:%d%s", a.port, path), nil)
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	resp, err := a.http.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return b, resp.StatusCode, err
}

// stop asks kube-apiserver to shut down and kills it after 30 s.
func (a *apiserver) stop() {
	if a.proc != nil && a.proc.Stop(30*time.Second) {
		a.log.Warn("kube-apiserver ignored SIGTERM; killed it")
	}
}

// cpuSeconds is what the running kube-apiserver has used since its start.
func (a *apiserver) cpuSeconds() float64 {
	if a.proc == nil {
		return 0
	}
	c, err := testenv.CPUSeconds(a.proc.Pid())
	if err != nil {
		a.log.Warn("kube-apiserver cpu", "error", err)
	}
	return c
}

// client is a client-go clientset without client-side rate limiting: the
// workers, not client-go's default 5 requests/s, set the pace.
func (a *apiserver) client() (*kubernetes.Clientset, error) {
	cfg := &rest.Config{
		Host:            fmt.Sprintf("https://127.0.0.1:%d", a.port),
		BearerToken:     a.token,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		QPS:             -1,
		Timeout:         60 * time.Second,
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("client-go: %w", err)
	}
	return cs, nil
}

// storageMetrics are the counters kube-apiserver keeps of its requests to
// storage: etcd_requests_total{operation,group,resource} in 1.37 (older
// releases: etcd_request_duration_seconds_count{operation,type}).
var labelRE = regexp.MustCompile(`(\w+)="((?:[^"\\]|\\.)*)"`)

// scrapeStorageRequests reads /metrics and returns the storage requests
// counted, by operation, over all resources and for ConfigMaps alone.
func (a *apiserver) scrapeStorageRequests(ctx context.Context) (all, configmaps map[string]float64, err error) {
	b, code, err := a.get(ctx, "/metrics")
	if err != nil {
		return nil, nil, fmt.Errorf("scrape kube-apiserver /metrics: %w", err)
	}
	if code != http.StatusOK {
		return nil, nil, fmt.Errorf("scrape kube-apiserver /metrics: status %d", code)
	}
	all, configmaps = map[string]float64{}, map[string]float64{}
	for _, metric := range []string{"etcd_requests_total{", "etcd_request_duration_seconds_count{"} {
		sc := bufio.NewScanner(strings.NewReader(string(b)))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if !strings.HasPrefix(line, metric) {
				continue
			}
			end := strings.LastIndexByte(line, '}')
			v, err := strconv.ParseFloat(strings.TrimSpace(line[end+1:]), 64)
			if err != nil {
				continue
			}
			labels := map[string]string{}
			for _, m := range labelRE.FindAllStringSubmatch(line[len(metric):end], -1) {
				labels[m[1]] = m[2]
			}
			op := labels["operation"]
			all[op] += v
			if labels["resource"] == "configmaps" || strings.Contains(labels["type"], "configmaps") {
				configmaps[op] += v
			}
		}
		if len(all) > 0 {
			break // the first metric this release has
		}
	}
	return all, configmaps, nil
}
