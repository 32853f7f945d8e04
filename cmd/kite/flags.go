package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/tlsutil"
	"go.etcd.io/etcd/client/pkg/v3/transport"

	"github.com/kite-db/kite/pkg/datastore"
	"github.com/kite-db/kite/pkg/drivers/raftsql"
	"github.com/kite-db/kite/pkg/drivers/sqlite"
	"github.com/kite-db/kite/pkg/mvcc"
	"github.com/kite-db/kite/pkg/server"
)

// envPrefix: every flag --some-name is also read from KITE_SOME_NAME. A flag
// given on the command line wins over the environment.
const envPrefix = "KITE_"

// serveFlags are the flags of `kite` (serve). Names follow etcd's where the
// meaning is the same.
type serveFlags struct {
	name                    string
	dataDir                 string
	listenClientURLs        urlsFlag
	listenMetricsURLs       urlsFlag
	advertiseClientURLs     urlsFlag
	advertisePeerURLs       urlsFlag
	maxRequestBytes         uint
	maxTxnOps               uint
	quotaBackendBytes       int64
	memoryBudget            byteSize
	watchProgressNotify     time.Duration
	autoCompactionMode      string
	autoCompactionRetention string
	logLevel                string
	authToken               string
	authTokenTTL            uint
	bcryptCost              uint
	logger                  string
	logOutputs              string
	warningApplyDuration    time.Duration
	logFormat               string
	enablePprof             bool

	// Client TLS and gRPC hardening, etcd's flags (server.TLSConfig).
	certFile               string
	keyFile                string
	trustedCAFile          string
	clientCertAuth         bool
	clientCRLFile          string
	clientAllowedHostnames stringsFlag
	cipherSuites           stringsFlag
	tlsMinVersion          string
	tlsMaxVersion          string
	autoTLS                bool
	selfSignedCertValidity uint
	maxConcurrentStreams   uint32Flag
	grpcKeepAliveMinTime   time.Duration
	grpcKeepAliveInterval  time.Duration
	grpcKeepAliveTimeout   time.Duration

	// raftsql: etcd's cluster flags.
	listenPeerURLs      urlsFlag
	initialCluster      string
	initialClusterState string
	initialClusterToken string
	// DNS SRV discovery, etcd's (discovery.go).
	discoverySRV     string
	discoverySRVName string
	heartbeatMs      uint
	electionMs       uint
	snapshotCount    uint64
	maxSnapshots     uint
	maxWALs          uint
	catchUpEntries   uint64
	corruptCheckTime time.Duration
	// idleRaft are the raft tuning flags given outside raftsql
	// (idleRaftFlags), warned about at start.
	idleRaft        []string
	packProposals   bool
	raftApplyBehind bool
	// raftsql peer TLS, etcd's flags.
	peerCertFile       string
	peerKeyFile        string
	peerTrustedCAFile  string
	peerClientCertAuth bool
	peerAutoTLS        bool
	peerCRLFile        string
	peerAllowedCNs     stringsFlag
	peerClientCertFile string
	peerClientKeyFile  string
	// raft is the bootstrap built from them when they select raftsql.
	raft *raftsql.Config

	datastoreEndpoint        string
	datastoreMaxOpenConns    int
	datastoreMaxIdleConns    int
	datastoreConnMaxLifetime time.Duration
	datastoreWakeListen      string
	experimentalLogCommit    bool

	// testMaxChanges is KITE_TEST_MAX_CHANGES_PER_REVISION (kitetest
	// builds only; hooks_testhooks.go).
	testMaxChanges int64
}

// aliasTarget returns the flag a deprecated alias stands for, or "".
func aliasTarget(name string) string {
	switch name {
	case "experimental-watch-progress-notify-interval":
		return "watch-progress-notify-interval"
	case "experimental-snapshot-catchup-entries":
		return "snapshot-catchup-entries"
	}
	return ""
}

func newServeFlagSet(f *serveFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("kite", flag.ContinueOnError)
	fs.StringVar(&f.name, "name", server.DefaultName, "Human-readable name for this member.")
	fs.StringVar(&f.dataDir, "data-dir", "./default.kite", "Path to the data directory (created 0700; the database is kite.db in it).")
	f.listenClientURLs = urlsFlag{server.DefaultListenClientURL}
	fs.Var(&f.listenClientURLs, "listen-client-urls", "Comma-separated `URLs` to serve clients on: http://host:port or unix:///path.")
	fs.Var(&f.listenMetricsURLs, "listen-metrics-urls", "Comma-separated extra `URLs` serving only /metrics, /health, /livez and /readyz: http://host:port or unix:///path.")
	fs.Var(&f.advertisePeerURLs, "initial-advertise-peer-urls", "Comma-separated peer `URLs` of this member as member lists report them (default: etcd's http://localhost:2380).")
	fs.Var(&f.advertiseClientURLs, "advertise-client-urls", "Comma-separated client `URLs` reported to clients in member lists (default: the listen URLs).")
	fs.UintVar(&f.maxRequestBytes, "max-request-bytes", server.DefaultMaxRequestBytes, "Maximum client request size in bytes the server will accept.")
	fs.UintVar(&f.maxTxnOps, "max-txn-ops", server.DefaultMaxTxnOps, "Maximum number of operations permitted in a transaction.")
	fs.Int64Var(&f.quotaBackendBytes, "quota-backend-bytes", server.DefaultQuotaBackendBytes, "Raise the NOSPACE alarm when the database exceeds this size (negative: no quota).")
	f.memoryBudget = defaultMemoryBudget
	fs.Var(&f.memoryBudget, "memory-budget", "What kite keeps in memory between requests, in bytes or with a suffix (512MiB, 2GiB): SQLite's page caches and file mappings, list pages read ahead, and the Go heap's soft limit (docs/architecture.md, \"Memory\").")
	fs.DurationVar(&f.watchProgressNotify, "watch-progress-notify-interval", server.DefaultWatchProgressNotifyInterval, "Duration of periodic watch progress notifications.")
	fs.DurationVar(&f.watchProgressNotify, "experimental-watch-progress-notify-interval", server.DefaultWatchProgressNotifyInterval, "Deprecated alias of --watch-progress-notify-interval.")
	fs.StringVar(&f.autoCompactionMode, "auto-compaction-mode", server.CompactionModePeriodic, "Interpret 'auto-compaction-retention' as one of: 'periodic' (a duration) or 'revision' (a revision count).")
	fs.StringVar(&f.autoCompactionRetention, "auto-compaction-retention", "0", "Auto compaction retention: for periodic a duration ('1h', '30m') or a number of hours; for revision a number of revisions. 0 disables.")
	fs.StringVar(&f.logLevel, "log-level", "info", "Log level: debug, info, warn or error.")
	fs.StringVar(&f.authToken, "auth-token", "simple", "Auth token type and options, as etcd: 'simple', or 'jwt,pub-key=PATH,priv-key=PATH,sign-method=RS256[,ttl=5m]'.")
	fs.UintVar(&f.authTokenTTL, "auth-token-ttl", 300, "Seconds an unused simple auth token lives.")
	fs.UintVar(&f.bcryptCost, "bcrypt-cost", 10, "Cost of the bcrypt hash of auth passwords (4-31).")
	fs.StringVar(&f.logger, "logger", "zap", "Accepted for etcd's command lines: 'zap', etcd's only logger (kite logs through log/slog in --log-format).")
	fs.StringVar(&f.logOutputs, "log-outputs", "default", "Comma-separated log destinations, as etcd: 'default' or 'stderr', 'stdout', or file paths (appended to).")
	fs.DurationVar(&f.warningApplyDuration, "warning-apply-duration", server.DefaultWarningApplyDuration, "Log a key-value or lease request that takes longer, as etcd's \"apply request took too long\".")
	fs.StringVar(&f.logFormat, "log-format", "text", "Log format: text or json.")
	fs.BoolVar(&f.enablePprof, "enable-pprof", false, "Enable runtime profiling data via HTTP server at /debug/pprof/ on the client URLs.")
	fs.StringVar(&f.certFile, "cert-file", "", "Path to the client server TLS cert file (served on https:// client URLs; reread on every handshake).")
	fs.StringVar(&f.keyFile, "key-file", "", "Path to the client server TLS key file.")
	fs.StringVar(&f.trustedCAFile, "trusted-ca-file", "", "Path to the client server TLS trusted CA cert file; set, clients must present a certificate it signed (as in etcd).")
	fs.BoolVar(&f.clientCertAuth, "client-cert-auth", false, "Enable client cert authentication.")
	fs.StringVar(&f.clientCRLFile, "client-crl-file", "", "Path to the client certificate revocation list file.")
	fs.Var(&f.clientAllowedHostnames, "client-cert-allowed-hostname", "Comma-separated `list` of allowed SAN hostnames for client cert authentication.")
	fs.Var(&f.cipherSuites, "cipher-suites", "Comma-separated `list` of supported TLS cipher suites between client/server (empty will be auto-populated by Go).")
	fs.StringVar(&f.tlsMinVersion, "tls-min-version", "TLS1.2", "Minimum TLS version supported. Possible values: TLS1.2, TLS1.3.")
	fs.StringVar(&f.tlsMaxVersion, "tls-max-version", "", "Maximum TLS version supported. Possible values: TLS1.2, TLS1.3 (empty defers to Go).")
	fs.BoolVar(&f.autoTLS, "auto-tls", false, "Client TLS using generated certificates (in <data-dir>/fixtures/client).")
	fs.UintVar(&f.selfSignedCertValidity, "self-signed-cert-validity", server.DefaultSelfSignedCertValidity, "The validity period of the client certificate generated by --auto-tls, in years.")
	f.maxConcurrentStreams = server.DefaultMaxConcurrentStreams
	fs.Var(&f.maxConcurrentStreams, "max-concurrent-streams", "Maximum concurrent streams that each client can open at a time.")
	fs.DurationVar(&f.grpcKeepAliveMinTime, "grpc-keepalive-min-time", server.DefaultGRPCKeepAliveMinTime, "Minimum interval duration that a client should wait before pinging server.")
	fs.DurationVar(&f.grpcKeepAliveInterval, "grpc-keepalive-interval", server.DefaultGRPCKeepAliveInterval, "Frequency duration of server-to-client ping to check if a connection is alive (0 to disable).")
	fs.DurationVar(&f.grpcKeepAliveTimeout, "grpc-keepalive-timeout", server.DefaultGRPCKeepAliveTimeout, "Additional duration of wait before closing a non-responsive connection (0 to disable).")
	fs.Var(&f.listenPeerURLs, "listen-peer-urls", "Comma-separated `URLs` to serve raft peers on (raftsql; default http://localhost:2380). Setting it, or --initial-cluster, selects raftsql.")
	fs.StringVar(&f.initialCluster, "initial-cluster", "", "Initial cluster configuration for bootstrapping, name=peerURL,... (raftsql).")
	fs.StringVar(&f.initialClusterState, "initial-cluster-state", "new", "Initial cluster state ('new' or 'existing').")
	fs.StringVar(&f.initialClusterToken, "initial-cluster-token", "etcd-cluster", "Initial cluster token for the cluster during bootstrap.")
	fs.StringVar(&f.discoverySRV, "discovery-srv", "", "DNS domain used to bootstrap the initial cluster (raftsql): its _etcd-server-ssl._tcp (https) and _etcd-server._tcp (http) SRV records are the members, this one found by --initial-advertise-peer-urls. Not with --initial-cluster; setting it selects raftsql.")
	fs.StringVar(&f.discoverySRVName, "discovery-srv-name", "", "Suffix of the SRV services --discovery-srv queries: _etcd-server-ssl-<name>._tcp and _etcd-server-<name>._tcp.")
	fs.UintVar(&f.heartbeatMs, "heartbeat-interval", 100, "Time (in milliseconds) of a heartbeat interval.")
	fs.UintVar(&f.electionMs, "election-timeout", 1000, "Time (in milliseconds) for an election to timeout.")
	fs.Uint64Var(&f.snapshotCount, "snapshot-count", 10000, "Number of committed transactions to trigger a snapshot to disk.")
	fs.UintVar(&f.maxSnapshots, "max-snapshots", 5, "Maximum number of snapshot files to retain (0 is unlimited).")
	fs.UintVar(&f.maxWALs, "max-wals", 5, "Maximum number of wal files to retain (0 is unlimited).")
	fs.Uint64Var(&f.catchUpEntries, "snapshot-catchup-entries", 5000, "Number of entries for a slow follower to catch-up after compacting the raft storage entries.")
	fs.Uint64Var(&f.catchUpEntries, "experimental-snapshot-catchup-entries", 5000, "Deprecated alias of --snapshot-catchup-entries.")
	fs.BoolVar(&f.packProposals, "raft-pack-proposals", false, "Propose the writes that queue up at a member while it hands its previous proposal to raft as one raft entry, instead of one entry per write (raftsql). Every member must run a kite that reads such entries (this flag's kite or later). Measured, not faster on a 2-core machine: see docs/benchmarks.md.")
	fs.BoolVar(&f.raftApplyBehind, "raft-apply-behind", true, "Apply committed entries into memory and move them into SQLite in large unsynced transactions behind the apply, the raft WAL being the commit point (raftsql). false: one synced SQLite commit per apply batch before the client is answered, slower (docs/benchmarks.md). Either way a restart replays from the WAL what SQLite does not hold.")
	fs.DurationVar(&f.corruptCheckTime, "corrupt-check-time", 5*time.Minute, "Duration of time between cluster corruption check passes (raftsql; the first runs shortly after start).")
	fs.StringVar(&f.peerCertFile, "peer-cert-file", "", "Path to the peer server TLS cert file (raftsql; served on https:// peer URLs and presented to other members).")
	fs.StringVar(&f.peerKeyFile, "peer-key-file", "", "Path to the peer server TLS key file.")
	fs.StringVar(&f.peerTrustedCAFile, "peer-trusted-ca-file", "", "Path to the peer server TLS trusted CA file.")
	fs.BoolVar(&f.peerClientCertAuth, "peer-client-cert-auth", false, "Enable peer client cert authentication.")
	fs.BoolVar(&f.peerAutoTLS, "peer-auto-tls", false, "Peer TLS using generated certificates (in <data-dir>/fixtures/peer).")
	fs.StringVar(&f.peerCRLFile, "peer-crl-file", "", "Path to the peer certificate revocation list file.")
	fs.StringVar(&f.peerClientCertFile, "peer-client-cert-file", "", "Path to the certificate this member presents to other members (default: --peer-cert-file).")
	fs.StringVar(&f.peerClientKeyFile, "peer-client-key-file", "", "Path to the key of --peer-client-cert-file.")
	fs.Var(&f.peerAllowedCNs, "peer-cert-allowed-cn", "Comma-separated `list` of allowed CNs for inter-peer TLS authentication.")
	fs.StringVar(&f.datastoreEndpoint, "datastore-endpoint", "", "Storage: empty or sqlite://PATH for the embedded SQLite database (kite.db in --data-dir by default); postgres://user:pass@host/db?sslmode=... for several kite servers on one Postgres database; mysql://user:pass@tcp(host:3306)/db (or mysql://user:pass@host:3306/db) for one kite server on a MySQL or MariaDB database; raftsql for a member of a raft cluster (also selected by --initial-cluster or --listen-peer-urls).")
	fs.IntVar(&f.datastoreMaxOpenConns, "datastore-max-open-connections", 0, "Most connections to a database server (0: the driver's default).")
	fs.IntVar(&f.datastoreMaxIdleConns, "datastore-max-idle-connections", 0, "Connections to a database server kept open while idle (0: the driver's default).")
	fs.DurationVar(&f.datastoreConnMaxLifetime, "datastore-connection-max-lifetime", 0, "Longest a database server connection is reused (0: the driver's default).")
	fs.BoolVar(&f.experimentalLogCommit, "experimental-sqlite-log-commit", false, "In sqlite mode: acknowledge a write once kite's own log (kite.db.log next to the database) has synced it, and apply it to SQLite in batches behind the log (pkg/mvcc/memtail). Started without it, kite first applies what such a log still holds and removes it. Measured, not yet faster: see docs/benchmarks.md. Refused in the other modes (raftsql applies behind its WAL: --raft-apply-behind).")
	fs.StringVar(&f.datastoreWakeListen, "datastore-wake-listen", "", "On MySQL: the host:port where this server takes the other kite servers' wake-ups after their commits; they must reach it (default: the host of the first advertised client URL, any port).")
	fs.Usage = func() { printUsage(fs.Output(), fs) }
	return fs
}

// parseServeFlags parses args, then fills every flag not given on the
// command line from its environment variable: KITE_<FLAG>, else, for a
// flag with etcd's meaning, ETCD_<FLAG>.
func parseServeFlags(args []string, getenv func(string) string) (*serveFlags, error) {
	f := &serveFlags{}
	fs := newServeFlagSet(f)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (see kite --help)", fs.Arg(0))
	}
	// A flag counts as given when it or its alias is on the command line.
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) {
		set[fl.Name] = true
		if target := aliasTarget(fl.Name); target != "" {
			set[target] = true
		}
	})
	var err error
	fs.VisitAll(func(fl *flag.Flag) {
		if err != nil || set[fl.Name] || set[aliasTarget(fl.Name)] {
			return
		}
		// KITE_ wins over ETCD_ (etcdenv.go).
		env := envName(fl.Name)
		v := getenv(env)
		if v == "" {
			if env = etcdEnvName(fl.Name); env != "" {
				v = getenv(env)
			}
		}
		if v == "" {
			return
		}
		if serr := fs.Set(fl.Name, v); serr != nil {
			err = fmt.Errorf("invalid value %q for %s: %w", v, env, serr)
		}
		set[fl.Name] = true
	})
	if err == nil {
		err = f.checkDiscoveryFlags()
	}
	if err == nil {
		err = checkMemoryBudget(f.memoryBudget)
	}
	if err == nil {
		f.testMaxChanges, err = testMaxChanges()
	}
	if err == nil {
		err = f.checkModeFlags(set)
		f.idleRaft = f.idleRaftFlags(set)
	}
	if err == nil && f.raftMode() {
		f.raft, err = f.raftConfig()
	}
	if err == nil && f.autoTLS && f.selfSignedCertValidity == 0 {
		// etcd's words (transport.SelfCert), refused before anything starts.
		err = errors.New("--self-signed-cert-validity: selfSignedCertValidity is invalid,it should be greater than 0")
	}
	return f, err
}

// envName is the environment variable of a flag: KITE_ + upper snake case.
func envName(flagName string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// config turns the flags into a server.Config. The storage is chosen here,
// by pkg/datastore, not in pkg/server.
func (f *serveFlags) config(log *slog.Logger) server.Config {
	ds := f.datastore(log)
	return server.Config{
		Name:    f.name,
		DataDir: f.dataDir,
		OpenBackend: func(ctx context.Context) (mvcc.Backend, error) {
			return datastore.Open(ctx, ds)
		},
		ListenClientURLs:            f.listenClientURLs,
		ListenMetricsURLs:           f.listenMetricsURLs,
		AdvertiseClientURLs:         f.advertiseClientURLs,
		AdvertisePeerURLs:           f.advertisePeerURLs,
		MaxRequestBytes:             int(f.maxRequestBytes),
		MaxTxnOps:                   int(f.maxTxnOps),
		QuotaBackendBytes:           f.quotaBackendBytes,
		WatchProgressNotifyInterval: f.watchProgressNotify,
		WarningApplyDuration:        f.warningApplyDuration,
		AuthToken:                   f.authToken,
		AuthTokenTTL:                time.Duration(f.authTokenTTL) * time.Second,
		BcryptCost:                  int(f.bcryptCost),
		ReadAheadBytes:              f.memoryShares().readAhead,
		WatchRingBytes:              f.memoryShares().watchRing,
		AutoCompactionMode:          f.autoCompactionMode,
		AutoCompactionRetention:     f.autoCompactionRetention,
		EnablePprof:                 f.enablePprof,
		TLS: server.TLSConfig{
			CertFile:               f.certFile,
			KeyFile:                f.keyFile,
			TrustedCAFile:          f.trustedCAFile,
			ClientCertAuth:         f.clientCertAuth,
			CRLFile:                f.clientCRLFile,
			AllowedHostnames:       f.clientAllowedHostnames,
			CipherSuites:           f.cipherSuites,
			MinVersion:             f.tlsMinVersion,
			MaxVersion:             f.tlsMaxVersion,
			AutoTLS:                f.autoTLS,
			SelfSignedCertValidity: f.selfSignedCertValidity,
		},
		MaxConcurrentStreams:  uint32(f.maxConcurrentStreams),
		GRPCKeepAliveMinTime:  disabledIfZero(f.grpcKeepAliveMinTime),
		GRPCKeepAliveInterval: disabledIfZero(f.grpcKeepAliveInterval),
		GRPCKeepAliveTimeout:  disabledIfZero(f.grpcKeepAliveTimeout),
		Logger:                log,
	}
}

// disabledIfZero maps etcd's "0 disables" of the keepalive flags onto
// server.Config, where 0 means the default and a negative value disables.
func disabledIfZero(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// memoryShares divides --memory-budget for these flags: applied behind a
// log, the readers' mappings get a smaller share (splitMemory): raftsql
// by default (--raft-apply-behind), sqlite with
// --experimental-sqlite-log-commit.
func (f *serveFlags) memoryShares() memoryShares {
	mode := f.mode()
	behind := mode == datastore.KindRaftSQL && f.raftApplyBehind ||
		mode == datastore.KindSQLite && f.experimentalLogCommit
	return splitMemory(int64(f.memoryBudget), behind)
}

// raftMode reports whether the flags select raftsql: etcd's cluster flags,
// or --datastore-endpoint raftsql.
func (f *serveFlags) raftMode() bool {
	return f.initialCluster != "" || len(f.listenPeerURLs) > 0 || f.discoverySRV != "" || f.datastoreEndpoint == datastore.KindRaftSQL
}

// raftConfig turns etcd's cluster flags into a raftsql member's bootstrap.
func (f *serveFlags) raftConfig() (*raftsql.Config, error) {
	// --cipher-suites and --tls-min/max-version are etcd's for peers too.
	ciphers, err := tlsutil.GetCipherSuites(f.cipherSuites)
	if err != nil {
		return nil, fmt.Errorf("--cipher-suites: %w", err)
	}
	minV, err := tlsutil.GetTLSVersion(f.tlsMinVersion)
	if err != nil {
		return nil, fmt.Errorf("--tls-min-version: %w", err)
	}
	maxV, err := tlsutil.GetTLSVersion(f.tlsMaxVersion)
	if err != nil {
		return nil, fmt.Errorf("--tls-max-version: %w", err)
	}
	advertisePeer := []string(f.advertisePeerURLs)
	if len(advertisePeer) == 0 {
		advertisePeer = []string{server.DefaultAdvertisePeerURL}
	}
	listenPeer := []string(f.listenPeerURLs)
	if len(listenPeer) == 0 {
		listenPeer = []string{server.DefaultAdvertisePeerURL}
	}
	initial := f.initialCluster
	if initial == "" && f.discoverySRV == "" {
		// etcd's default: a cluster of this member alone (with
		// --discovery-srv, DNS gives the cluster when serving starts).
		initial = f.name + "=" + strings.Join(advertisePeer, ","+f.name+"=")
	}
	cluster, err := raftsql.ParseInitialCluster(initial)
	if err != nil {
		return nil, err
	}
	client := []string(f.advertiseClientURLs)
	if len(client) == 0 {
		client = f.listenClientURLs
	}
	return &raftsql.Config{
		Name:            f.name,
		InitialCluster:  cluster,
		ClusterState:    f.initialClusterState,
		Token:           f.initialClusterToken,
		ListenPeer:      listenPeer,
		AdvertisePeer:   advertisePeer,
		AdvertiseClient: client,
		Heartbeat:       time.Duration(f.heartbeatMs) * time.Millisecond,
		Election:        time.Duration(f.electionMs) * time.Millisecond,
		SnapshotCount:   f.snapshotCount,
		MaxSnapshots:    int(f.maxSnapshots),
		MaxWALs:         int(f.maxWALs),
		CatchUpEntries:  f.catchUpEntries,
		MaxRequestBytes: int(f.maxRequestBytes),
		PackProposals:   f.packProposals,
		ApplyBehind:     f.raftApplyBehind,

		CorruptCheckInterval: f.corruptCheckTime,
		PeerTLS: raftsql.PeerTLS{
			Info: transport.TLSInfo{
				CertFile:       f.peerCertFile,
				KeyFile:        f.peerKeyFile,
				TrustedCAFile:  f.peerTrustedCAFile,
				ClientCertAuth: f.peerClientCertAuth,
				CRLFile:        f.peerCRLFile,
				AllowedCNs:     f.peerAllowedCNs,
				ClientCertFile: f.peerClientCertFile,
				ClientKeyFile:  f.peerClientKeyFile,
				CipherSuites:   ciphers,
				MinVersion:     minV,
				MaxVersion:     maxV,
			},
			AutoTLS:  f.peerAutoTLS,
			Validity: f.selfSignedCertValidity,
		},
		// Tests partition members through it (kitetest builds only).
		TestFaults: testPeerFaults(),
	}, nil
}

// datastore says where the data lives, from --datastore-* and --data-dir.
func (f *serveFlags) datastore(log *slog.Logger) datastore.Config {
	return datastore.Config{
		Endpoint:        f.datastoreEndpoint,
		DataDir:         f.dataDir,
		MaxOpenConns:    f.datastoreMaxOpenConns,
		MaxIdleConns:    f.datastoreMaxIdleConns,
		ConnMaxLifetime: f.datastoreConnMaxLifetime,
		WakeListen:      f.wakeListen(),
		Raft:            f.raft,
		SQLite:          f.sqliteOptions(),
		LogCommit:       f.experimentalLogCommit,
		RowCacheBytes:   f.memoryShares().rowCache,
		Logger:          log,
	}
}

// wakeListen is --datastore-wake-listen, or else a free port on the host
// the clients reach this server at: the other servers of a MySQL database
// can reach it there too, as a rule.
func (f *serveFlags) wakeListen() string {
	if f.datastoreWakeListen != "" {
		return f.datastoreWakeListen
	}
	client := []string(f.advertiseClientURLs)
	if len(client) == 0 {
		client = f.listenClientURLs
	}
	for _, c := range client {
		if u, err := url.Parse(c); err == nil && u.Hostname() != "" && u.Scheme != "unix" && u.Scheme != "unixs" {
			return net.JoinHostPort(u.Hostname(), "0")
		}
	}
	return ""
}

// sqliteOptions tunes the SQLite databases from --memory-budget (and, in
// a -tags kitetest build, a test's lower change-count bound).
func (f *serveFlags) sqliteOptions() sqlite.Options {
	opts := f.memoryShares().sqlite()
	opts.MaxChangesPerRevision = f.testMaxChanges
	return opts
}

// newLogger builds the process logger from --log-level and --log-format.
func (f *serveFlags) newLogger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", f.logLevel)
	}
	if f.logger != "" && f.logger != "zap" {
		return nil, fmt.Errorf("--logger: unknown logger option %q (etcd's only logger is zap)", f.logger)
	}
	w, err := f.logWriter(w)
	if err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: level}
	switch f.logFormat {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, fmt.Errorf("--log-format %q: want text or json", f.logFormat)
	}
}

// logWriter is where --log-outputs sends the log: "default" and "stderr"
// are def (the process's stderr), "stdout" stdout, anything else a file
// the log is appended to (kept open for the life of the process).
func (f *serveFlags) logWriter(def io.Writer) (io.Writer, error) {
	var ws []io.Writer
	for _, out := range strings.Split(f.logOutputs, ",") {
		switch out = strings.TrimSpace(out); out {
		case "", "default", "stderr":
			ws = append(ws, def)
		case "stdout":
			ws = append(ws, os.Stdout)
		default:
			file, err := os.OpenFile(out, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
			if err != nil {
				return nil, fmt.Errorf("--log-outputs: %w", err)
			}
			ws = append(ws, file)
		}
	}
	if len(ws) == 1 {
		return ws[0], nil
	}
	return io.MultiWriter(ws...), nil
}

// urlsFlag is a comma-separated list of URLs. Setting it replaces the
// default rather than appending to it.
type urlsFlag []string

func (u *urlsFlag) String() string { return strings.Join(*u, ",") }

func (u *urlsFlag) Set(v string) error {
	var urls []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			urls = append(urls, s)
		}
	}
	if len(urls) == 0 {
		return fmt.Errorf("no URL in %q", v)
	}
	*u = urls
	return nil
}

// stringsFlag is a comma-separated list, etcd's flags.StringsValue; setting
// it replaces the previous value, and an empty value is an empty list.
type stringsFlag []string

func (s *stringsFlag) String() string { return strings.Join(*s, ",") }

func (s *stringsFlag) Set(v string) error {
	var list []string
	for _, e := range strings.Split(v, ",") {
		if e = strings.TrimSpace(e); e != "" {
			list = append(list, e)
		}
	}
	*s = list
	return nil
}

// uint32Flag is an unsigned 32-bit flag, etcd's flags.Uint32Value.
type uint32Flag uint32

func (u *uint32Flag) String() string { return strconv.FormatUint(uint64(*u), 10) }

func (u *uint32Flag) Set(v string) error {
	n, err := strconv.ParseUint(v, 10, 32)
	if err != nil {
		return fmt.Errorf("want an unsigned 32-bit number: %w", err)
	}
	*u = uint32Flag(n)
	return nil
}

// printUsage lists every flag with its default and environment variable.
func printUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(w, `Usage:
  kite [flags]          serve the etcd v3 API from SQLite (default), Postgres, MySQL or raftsql
  kite snapshot save    stream a snapshot from a running server to a file
  kite snapshot restore create a data dir from a snapshot (kite snapshot for usage)
  kite copy             copy a cluster between storages, or from an etcd (kite copy --help)
  kite version          print version information

Every flag can also be set through an environment variable (shown below);
a flag with etcd's name and meaning also reads etcd's ETCD_ variable. A flag
given on the command line wins, then KITE_, then ETCD_. The flags of one
storage mode are listed under it; a mode's flag given in another mode is
refused.
`)
	for _, g := range helpGroups {
		fmt.Fprintf(w, "\n%s:\n", g.title)
		fs.VisitAll(func(fl *flag.Flag) {
			if flagGroup(fl.Name) == g.mode {
				printFlag(w, fl)
			}
		})
	}
}

// printFlag prints one flag of kite --help.
func printFlag(w io.Writer, fl *flag.Flag) {
	name, usage := flag.UnquoteUsage(fl)
	fmt.Fprintf(w, "  --%s %s\n", fl.Name, name)
	fmt.Fprintf(w, "        %s\n", usage)
	if fl.DefValue != "" && fl.DefValue != "[]" {
		fmt.Fprintf(w, "        default: %s\n", fl.DefValue)
	}
	if e := etcdEnvName(fl.Name); e != "" {
		fmt.Fprintf(w, "        env: %s, %s\n", envName(fl.Name), e)
	} else {
		fmt.Fprintf(w, "        env: %s\n", envName(fl.Name))
	}
}
