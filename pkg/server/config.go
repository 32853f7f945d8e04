package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"time"

	"github.com/kite-db/kite/pkg/mvcc"
)

// Defaults, the same values etcd uses for the flags of the same name.
const (
	DefaultName                        = "default"
	DefaultListenClientURL             = "http://127.0.0.1:2379"
	DefaultAdvertisePeerURL            = "http://localhost:2380"
	DefaultMaxRequestBytes             = 1.5 * 1024 * 1024
	DefaultMaxTxnOps                   = 128
	DefaultQuotaBackendBytes           = 2 * 1024 * 1024 * 1024
	DefaultWatchProgressNotifyInterval = 10 * time.Minute

	// grpcOverheadBytes is added to MaxRequestBytes for the gRPC receive
	// limit, as etcd does, so that a request slightly over the limit reaches
	// the handler and gets etcd's "request is too large" error instead of
	// gRPC's ResourceExhausted.
	grpcOverheadBytes = 512 * 1024

	// minWatchProgressNotifyInterval is etcd's floor for the interval.
	minWatchProgressNotifyInterval = 100 * time.Millisecond

	// gRPC hardening, etcd's --max-concurrent-streams and
	// --grpc-keepalive-* defaults. MinTime matters most: gRPC's own default
	// (5 min) would answer kube-apiserver's 30 s pings with GOAWAY.
	DefaultMaxConcurrentStreams  = math.MaxUint32
	DefaultGRPCKeepAliveMinTime  = 5 * time.Second
	DefaultGRPCKeepAliveInterval = 2 * time.Hour
	DefaultGRPCKeepAliveTimeout  = 20 * time.Second
)

// Auto-compaction modes (etcd --auto-compaction-mode).
const (
	CompactionModePeriodic = "periodic"
	CompactionModeRevision = "revision"
)

// Config describes one kite server. The zero value of every field except
// DataDir takes etcd's default.
type Config struct {
	// Name is the human-readable member name (etcd --name).
	Name string
	// DataDir is this member's directory (created 0700, locked against a
	// second kite); with the default storage it holds the SQLite database.
	DataDir string
	// OpenBackend opens the storage once DataDir is locked; the server
	// closes what it returns. pkg/datastore builds one from a
	// --datastore-endpoint URL. Required.
	OpenBackend func(ctx context.Context) (mvcc.Backend, error)
	// ListenClientURLs are the URLs to serve clients on: http://host:port,
	// https://host:port (TLS, see TLS), unix:///abs/path or unix://rel/path
	// (unixs:// for TLS on a socket). Default http://127.0.0.1:2379.
	ListenClientURLs []string
	// ListenMetricsURLs are extra plain HTTP URLs (http://host:port or a
	// unix socket) that serve only /metrics, /health, /livez and /readyz
	// (etcd --listen-metrics-urls).
	ListenMetricsURLs []string
	// AdvertisePeerURLs are this member's peer URLs as MemberList reports
	// them (etcd --initial-advertise-peer-urls; default etcd's
	// http://localhost:2380). A single kite member has no peers to talk to.
	AdvertisePeerURLs []string
	// AdvertiseClientURLs are reported in MemberList and feed the member ID.
	// Default: ListenClientURLs.
	AdvertiseClientURLs []string

	// MaxRequestBytes bounds a write request (default 1.5 MiB).
	MaxRequestBytes int
	// MaxTxnOps bounds the operations of one txn (default 128).
	MaxTxnOps int
	// QuotaBackendBytes raises the NOSPACE alarm past this size (default
	// 2 GiB; negative disables the quota).
	QuotaBackendBytes int64
	// WatchProgressNotifyInterval is the period of progress notifications
	// (default 10 min, minimum 100 ms).
	WatchProgressNotifyInterval time.Duration

	// AutoCompactionMode is "periodic", "revision" or "" (off).
	AutoCompactionMode string
	// AutoCompactionRetention: for periodic a duration ("1h", "30m") or a
	// plain number of hours; for revision a number of revisions. "0" or ""
	// turns compaction off.
	AutoCompactionRetention string

	// TLS is the TLS of the https:// and unixs:// client URLs (etcd's
	// --cert-file, --key-file, --trusted-ca-file, ... flags); http:// and
	// unix:// URLs ignore it, as etcd does.
	TLS TLSConfig

	// MaxConcurrentStreams bounds the HTTP/2 streams (RPCs, watches) one
	// client connection may have open at once (default: unlimited, etcd's
	// math.MaxUint32).
	MaxConcurrentStreams uint32
	// GRPCKeepAliveMinTime is the shortest interval between a client's
	// pings; a client pinging more often is sent GOAWAY (default 5 s;
	// negative: no enforcement).
	GRPCKeepAliveMinTime time.Duration
	// GRPCKeepAliveInterval is how long a connection may be idle before the
	// server pings it (default 2 h); GRPCKeepAliveTimeout is how long it
	// waits for the answer before closing the connection (default 20 s).
	// Negative either: the server does not ping.
	GRPCKeepAliveInterval time.Duration
	GRPCKeepAliveTimeout  time.Duration

	// EnablePprof serves net/http/pprof's handlers under /debug/pprof/ on
	// the HTTP side of every client URL (etcd --enable-pprof).
	EnablePprof bool

	// WarningApplyDuration: a key-value or lease request that takes longer
	// is logged as etcd's "apply request took too long" (etcd
	// --warning-apply-duration; default 100ms).
	WarningApplyDuration time.Duration

	// AuthToken, AuthTokenTTL and BcryptCost are etcd's --auth-token
	// ("simple" or "jwt,pub-key=...,priv-key=...,sign-method=..."),
	// --auth-token-ttl and --bcrypt-cost (mvcc.Config).
	AuthToken    string
	AuthTokenTTL time.Duration
	BcryptCost   int

	// ReadAheadBytes bounds the list pages read ahead of their request
	// (mvcc.Config; kite's share of --memory-budget).
	ReadAheadBytes int64
	// WatchRingBytes bounds the recent watch events kept in memory
	// (mvcc.Config; kite's share of --memory-budget).
	WatchRingBytes int64

	// Logger receives every log line. Default: slog.Default().
	Logger *slog.Logger
}

// withDefaults returns a copy of c with etcd's defaults filled in.
func (c Config) withDefaults() Config {
	if c.Name == "" {
		c.Name = DefaultName
	}
	if len(c.ListenClientURLs) == 0 {
		c.ListenClientURLs = []string{DefaultListenClientURL}
	}
	if len(c.AdvertiseClientURLs) == 0 {
		c.AdvertiseClientURLs = c.ListenClientURLs
	}
	if len(c.AdvertisePeerURLs) == 0 {
		c.AdvertisePeerURLs = []string{DefaultAdvertisePeerURL}
	}
	if c.MaxRequestBytes <= 0 {
		c.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if c.MaxTxnOps <= 0 {
		c.MaxTxnOps = DefaultMaxTxnOps
	}
	if c.QuotaBackendBytes == 0 {
		c.QuotaBackendBytes = DefaultQuotaBackendBytes
	}
	if c.WatchProgressNotifyInterval <= 0 {
		c.WatchProgressNotifyInterval = DefaultWatchProgressNotifyInterval
	}
	if c.WatchProgressNotifyInterval < minWatchProgressNotifyInterval {
		c.WatchProgressNotifyInterval = minWatchProgressNotifyInterval
	}
	if c.WarningApplyDuration <= 0 {
		c.WarningApplyDuration = DefaultWarningApplyDuration
	}
	if c.MaxConcurrentStreams == 0 {
		c.MaxConcurrentStreams = DefaultMaxConcurrentStreams
	}
	if c.GRPCKeepAliveMinTime == 0 {
		c.GRPCKeepAliveMinTime = DefaultGRPCKeepAliveMinTime
	}
	if c.GRPCKeepAliveInterval == 0 {
		c.GRPCKeepAliveInterval = DefaultGRPCKeepAliveInterval
	}
	if c.GRPCKeepAliveTimeout == 0 {
		c.GRPCKeepAliveTimeout = DefaultGRPCKeepAliveTimeout
	}
	c.TLS = c.TLS.withDefaults()
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// validate rejects configurations that cannot work.
func (c Config) validate() error {
	if c.DataDir == "" {
		return errors.New("data dir is required")
	}
	if c.OpenBackend == nil {
		return errors.New("no storage: OpenBackend is required (see pkg/datastore)")
	}
	if _, err := c.compactionRetention(); err != nil {
		return err
	}
	for _, u := range c.ListenClientURLs {
		if _, _, _, err := parseListenURL(u); err != nil {
			return err
		}
	}
	for _, u := range c.ListenMetricsURLs {
		if _, _, secure, err := parseListenURL(u); err != nil {
			return fmt.Errorf("--listen-metrics-urls: %w", err)
		} else if secure {
			return fmt.Errorf("--listen-metrics-urls %q: kite serves metrics over plain http only", u)
		}
	}
	return c.TLS.validate(c.ListenClientURLs)
}

// compactionRetention parses AutoCompactionRetention the way etcd's
// parseCompactionRetention does: a bare integer is hours (periodic) or
// revisions (revision); otherwise a Go duration, which only periodic accepts.
// It returns 0 when compaction is off.
func (c Config) compactionRetention() (time.Duration, error) {
	if c.AutoCompactionMode == "" {
		return 0, nil
	}
	if c.AutoCompactionRetention == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(c.AutoCompactionRetention, 10, 64)
	if err == nil && n >= 0 {
		switch c.AutoCompactionMode {
		case CompactionModeRevision:
			return time.Duration(n), nil
		case CompactionModePeriodic:
			return time.Duration(n) * time.Hour, nil
		}
		return 0, fmt.Errorf("unknown --auto-compaction-mode %q (want periodic or revision)", c.AutoCompactionMode)
	}
	if c.AutoCompactionMode != CompactionModePeriodic {
		if c.AutoCompactionMode != CompactionModeRevision {
			return 0, fmt.Errorf("unknown --auto-compaction-mode %q (want periodic or revision)", c.AutoCompactionMode)
		}
		return 0, fmt.Errorf("--auto-compaction-retention %q: revision mode needs a number of revisions", c.AutoCompactionRetention)
	}
	d, err := time.ParseDuration(c.AutoCompactionRetention)
	if err != nil {
		return 0, fmt.Errorf("parse --auto-compaction-retention: %w", err)
	}
	if d < 0 {
		return 0, fmt.Errorf("--auto-compaction-retention %q is negative", c.AutoCompactionRetention)
	}
	return d, nil
}
