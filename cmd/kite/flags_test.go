package main

import (
	"bytes"
	"flag"
	"slices"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestParseServeFlagsDefaults(t *testing.T) {
	f, err := parseServeFlags(nil, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	c := f.config(nil)
	if c.Name != "default" || c.DataDir != "./default.kite" || c.ListenClientURLs[0] != "http://127.0.0.1:2379" ||
		c.MaxRequestBytes != 1572864 || c.MaxTxnOps != 128 || c.QuotaBackendBytes != 2<<30 ||
		c.WatchProgressNotifyInterval != 10*time.Minute || c.AutoCompactionMode != "periodic" || c.AutoCompactionRetention != "0" || len(c.AdvertiseClientURLs) != 0 {
		t.Fatalf("defaults: %+v", c)
	}
}

func TestParseServeFlagsEnv(t *testing.T) {
	f, err := parseServeFlags(
		[]string{"--data-dir", "/flag", "--max-txn-ops=7"},
		env(map[string]string{
			"KITE_DATA_DIR":                       "/env",
			"KITE_NAME":                           "n1",
			"KITE_LISTEN_CLIENT_URLS":             "http://127.0.0.1:1, unix:///tmp/k.sock",
			"KITE_MAX_TXN_OPS":                    "9",
			"KITE_AUTO_COMPACTION_MODE":           "revision",
			"KITE_AUTO_COMPACTION_RETENTION":      "1000",
			"KITE_WATCH_PROGRESS_NOTIFY_INTERVAL": "5s",
		}))
	if err != nil {
		t.Fatal(err)
	}
	c := f.config(nil)
	if c.DataDir != "/flag" || c.MaxTxnOps != 7 {
		t.Errorf("command line must win over env: %+v", c)
	}
	if c.Name != "n1" || strings.Join(c.ListenClientURLs, " ") != "http://127.0.0.1:1 unix:///tmp/k.sock" ||
		c.AutoCompactionMode != "revision" || c.AutoCompactionRetention != "1000" || c.WatchProgressNotifyInterval != 5*time.Second {
		t.Errorf("env not applied: %+v", c)
	}
}

// TestParseDatastoreFlags: k3s's datastore flags and their KITE_ variables
// reach the storage's configuration.
func TestParseDatastoreFlags(t *testing.T) {
	f, err := parseServeFlags(
		[]string{"--datastore-max-open-connections=20", "--data-dir", "/d"},
		env(map[string]string{
			"KITE_DATASTORE_ENDPOINT":                "postgres://u:p@db/kite",
			"KITE_DATASTORE_MAX_OPEN_CONNECTIONS":    "99",
			"KITE_DATASTORE_MAX_IDLE_CONNECTIONS":    "3",
			"KITE_DATASTORE_CONNECTION_MAX_LIFETIME": "90s",
		}))
	if err != nil {
		t.Fatal(err)
	}
	ds := f.datastore(nil)
	if ds.Endpoint != "postgres://u:p@db/kite" || ds.DataDir != "/d" || ds.MaxOpenConns != 20 ||
		ds.MaxIdleConns != 3 || ds.ConnMaxLifetime != 90*time.Second {
		t.Errorf("datastore config: %+v", ds)
	}
	if f.config(nil).OpenBackend == nil {
		t.Error("server config has no storage opener")
	}
}

func TestParseServeFlagsAlias(t *testing.T) {
	f, err := parseServeFlags([]string{"--experimental-watch-progress-notify-interval=3s"},
		env(map[string]string{"KITE_WATCH_PROGRESS_NOTIFY_INTERVAL": "9s"}))
	if err != nil {
		t.Fatal(err)
	}
	if f.watchProgressNotify != 3*time.Second {
		t.Fatalf("alias on the command line must win over env: %v", f.watchProgressNotify)
	}
	f, err = parseServeFlags(nil, env(map[string]string{"KITE_EXPERIMENTAL_WATCH_PROGRESS_NOTIFY_INTERVAL": "4s"}))
	if err != nil || f.watchProgressNotify != 4*time.Second {
		t.Fatalf("alias env: %v %v", f.watchProgressNotify, err)
	}
}

func TestParseServeFlagsErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		env  map[string]string
	}{
		{[]string{"--max-txn-ops=x"}, nil},
		{nil, map[string]string{"KITE_MAX_REQUEST_BYTES": "-1"}},
		{[]string{"extra"}, nil},
		{[]string{"--listen-client-urls="}, nil},
	} {
		if _, err := parseServeFlags(tt.args, env(tt.env)); err == nil {
			t.Errorf("%v %v: no error", tt.args, tt.env)
		}
	}
}

func TestUsageListsEnv(t *testing.T) {
	var f serveFlags
	fs := newServeFlagSet(&f)
	var buf bytes.Buffer
	fs.SetOutput(&buf)
	fs.Usage()
	fs.VisitAll(func(fl *flag.Flag) {
		if !strings.Contains(buf.String(), "--"+fl.Name) || !strings.Contains(buf.String(), envName(fl.Name)) {
			t.Errorf("usage misses --%s or %s", fl.Name, envName(fl.Name))
		}
	})
}

func TestNewLogger(t *testing.T) {
	for _, tt := range []struct {
		level, format string
		ok            bool
	}{
		{"info", "text", true}, {"debug", "json", true}, {"warn", "text", true}, {"error", "json", true},
		{"loud", "text", false}, {"info", "xml", false},
	} {
		f := serveFlags{logLevel: tt.level, logFormat: tt.format}
		if _, err := f.newLogger(&bytes.Buffer{}); (err == nil) != tt.ok {
			t.Errorf("%s/%s: %v", tt.level, tt.format, err)
		}
	}
}

// TestParseTLSFlags: etcd's client TLS and gRPC hardening flags, and their
// KITE_ variables, reach server.Config with etcd's defaults and meaning
// (0 disables a keepalive setting).
func TestParseTLSFlags(t *testing.T) {
	f, err := parseServeFlags(nil, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	c := f.config(nil)
	if c.TLS.MinVersion != "TLS1.2" || c.TLS.MaxVersion != "" || c.TLS.SelfSignedCertValidity != 1 || c.TLS.ClientCertAuth ||
		c.MaxConcurrentStreams != 1<<32-1 || c.GRPCKeepAliveMinTime != 5*time.Second ||
		c.GRPCKeepAliveInterval != 2*time.Hour || c.GRPCKeepAliveTimeout != 20*time.Second {
		t.Errorf("defaults: %+v", c)
	}
	f, err = parseServeFlags(
		[]string{"--cert-file", "/c.pem", "--client-cert-auth", "--cipher-suites", "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "--grpc-keepalive-interval=0"},
		env(map[string]string{
			"KITE_CERT_FILE":                    "/env.pem",
			"KITE_KEY_FILE":                     "/k.pem",
			"KITE_TRUSTED_CA_FILE":              "/ca.pem",
			"KITE_CLIENT_CRL_FILE":              "/crl.der",
			"KITE_CLIENT_CERT_ALLOWED_HOSTNAME": "a,b",
			"KITE_TLS_MIN_VERSION":              "TLS1.3",
			"KITE_TLS_MAX_VERSION":              "TLS1.3",
			"KITE_AUTO_TLS":                     "true",
			"KITE_SELF_SIGNED_CERT_VALIDITY":    "3",
			"KITE_MAX_CONCURRENT_STREAMS":       "100",
			"KITE_GRPC_KEEPALIVE_MIN_TIME":      "1s",
			"KITE_GRPC_KEEPALIVE_TIMEOUT":       "3s",
		}))
	if err != nil {
		t.Fatal(err)
	}
	c = f.config(nil)
	tc := c.TLS
	if tc.CertFile != "/c.pem" || tc.KeyFile != "/k.pem" || tc.TrustedCAFile != "/ca.pem" || !tc.ClientCertAuth ||
		tc.CRLFile != "/crl.der" || strings.Join(tc.AllowedHostnames, " ") != "a b" ||
		strings.Join(tc.CipherSuites, " ") != "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256" ||
		tc.MinVersion != "TLS1.3" || tc.MaxVersion != "TLS1.3" || !tc.AutoTLS || tc.SelfSignedCertValidity != 3 {
		t.Errorf("TLS: %+v", tc)
	}
	if c.MaxConcurrentStreams != 100 || c.GRPCKeepAliveMinTime != time.Second || c.GRPCKeepAliveInterval >= 0 || c.GRPCKeepAliveTimeout != 3*time.Second {
		t.Errorf("hardening: %+v", c)
	}
	for _, bad := range [][]string{
		{"--max-concurrent-streams=4294967296"},
		{"--auto-tls", "--self-signed-cert-validity=0"},
	} {
		if _, err := parseServeFlags(bad, env(nil)); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}

// TestParseServeFlagsEtcdEnv: a manifest written for etcd (ETCD_ variables)
// configures kite; KITE_ wins over ETCD_, the command line over both, and
// kite's own flags do not read ETCD_.
func TestParseServeFlagsEtcdEnv(t *testing.T) {
	f, err := parseServeFlags([]string{"--max-txn-ops=7"}, env(map[string]string{
		"ETCD_NAME":                      "etcd-0",
		"ETCD_DATA_DIR":                  "/var/lib/etcd",
		"KITE_DATA_DIR":                  "/var/lib/kite",
		"ETCD_LISTEN_CLIENT_URLS":        "http://127.0.0.1:2379",
		"ETCD_MAX_TXN_OPS":               "9",
		"ETCD_AUTO_COMPACTION_MODE":      "revision",
		"ETCD_AUTO_COMPACTION_RETENTION": "1000",
		"ETCD_LOG_FORMAT":                "json",
		"ETCD_DATASTORE_ENDPOINT":        "postgres://x",
	}))
	if err != nil {
		t.Fatal(err)
	}
	c := f.config(nil)
	if c.Name != "etcd-0" || strings.Join(c.ListenClientURLs, ",") != "http://127.0.0.1:2379" ||
		c.AutoCompactionMode != "revision" || c.AutoCompactionRetention != "1000" {
		t.Errorf("ETCD_ variables not applied: %+v", c)
	}
	if c.DataDir != "/var/lib/kite" {
		t.Errorf("data dir %q: KITE_DATA_DIR must win over ETCD_DATA_DIR", c.DataDir)
	}
	if c.MaxTxnOps != 7 {
		t.Errorf("max txn ops %d: the command line must win over ETCD_MAX_TXN_OPS", c.MaxTxnOps)
	}
	if f.logFormat != "text" || f.datastoreEndpoint != "" {
		t.Errorf("kite's own flags read ETCD_ variables: log format %q, datastore %q", f.logFormat, f.datastoreEndpoint)
	}
	got := unknownEtcdEnv([]string{"ETCD_NAME=x", "ETCD_INITIAL_CLUSTER=a=b", "ETCD_DISCOVERY_ENDPOINTS=http://127.0.0.1:2379",
		"ETCDCTL_API=3", "PATH=/bin", "ETCD_LOG_FORMAT=json"})
	if want := []string{"ETCD_DISCOVERY_ENDPOINTS", "ETCD_LOG_FORMAT"}; !slices.Equal(got, want) {
		t.Errorf("unknown ETCD_ variables = %v; want %v", got, want)
	}
}

// TestParseServeFlagsRaft: etcd's cluster flags (or their ETCD_ variables)
// select raftsql and become the member's bootstrap; without them kite stays
// a single SQLite server.
func TestParseServeFlagsRaft(t *testing.T) {
	f, err := parseServeFlags(nil, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if f.raft != nil || f.datastore(nil).Raft != nil {
		t.Fatalf("no cluster flag, yet raftsql selected: %+v", f.raft)
	}
	f, err = parseServeFlags([]string{"--name=n1", "--initial-advertise-peer-urls=http://127.0.0.1:2381",
		"--listen-peer-urls=http://127.0.0.1:2381", "--heartbeat-interval=50", "--election-timeout=500"},
		env(map[string]string{
			"ETCD_INITIAL_CLUSTER":       "n0=http://127.0.0.1:2380,n1=http://127.0.0.1:2381",
			"ETCD_INITIAL_CLUSTER_TOKEN": "tok",
			"ETCD_SNAPSHOT_COUNT":        "500",
		}))
	if err != nil {
		t.Fatal(err)
	}
	r := f.datastore(nil).Raft
	if r == nil {
		t.Fatal("--initial-cluster given, raftsql not selected")
	}
	if r.Name != "n1" || len(r.InitialCluster) != 2 || r.InitialCluster["n0"][0] != "http://127.0.0.1:2380" ||
		r.Token != "tok" || r.SnapshotCount != 500 || r.Heartbeat != 50*time.Millisecond ||
		r.Election != 500*time.Millisecond || r.ClusterState != "new" {
		t.Errorf("raft bootstrap = %+v", r)
	}
	if _, err := parseServeFlags([]string{"--initial-cluster=n0"}, env(nil)); err == nil {
		t.Error("--initial-cluster=n0 (no URL) accepted")
	}
}
