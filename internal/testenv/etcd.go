package testenv

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// EtcdConfig is a reference etcd member: the settings the tests and the
// load tools give it; everything else is etcd's default (fsync on, the
// durability kite promises; heartbeat 100 ms and election timeout 1 s, as
// kite's raft members have).
type EtcdConfig struct {
	Name string
	Dir  string
	// ClientURL is listened on and advertised.
	ClientURL string
	// PeerURL is listened on and advertised; "" is a free loopback port
	// (a single-member cluster only).
	PeerURL string
	// InitialCluster is name=peerURL,... of every member; "" is this
	// member alone.
	InitialCluster string
	Token          string // cluster token; "" keeps etcd's default
	// QuotaBackendBytes is etcd's --quota-backend-bytes (0: its default).
	QuotaBackendBytes           int64
	AuthToken                   string        // "" keeps etcd's default
	WatchProgressNotifyInterval time.Duration // 0 keeps etcd's default
	// Logger replaces etcd's own logger (at level error); nil keeps it.
	Logger *zap.Logger
	// ReadyTimeout bounds the wait for the member to serve (0: 60 s).
	ReadyTimeout time.Duration
}

// StartEtcd starts an embedded etcd member and waits until it is ready:
// for a member of a larger cluster, until the cluster has a quorum, so
// every member must be starting meanwhile. The caller closes it.
func StartEtcd(ctx context.Context, c EtcdConfig) (*embed.Etcd, error) {
	cu, err := url.Parse(c.ClientURL)
	if err != nil {
		return nil, fmt.Errorf("parse client URL: %w", err)
	}
	peer := c.PeerURL
	if peer == "" {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		peer = "http://127.0.0.1:" + strconv.Itoa(port)
	}
	pu, err := url.Parse(peer)
	if err != nil {
		return nil, fmt.Errorf("parse peer URL: %w", err)
	}
	cfg := embed.NewConfig()
	cfg.Name = c.Name
	cfg.Dir = c.Dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	if c.InitialCluster != "" {
		cfg.InitialCluster = c.InitialCluster
	}
	if c.Token != "" {
		cfg.InitialClusterToken = c.Token
	}
	cfg.QuotaBackendBytes = c.QuotaBackendBytes
	if c.AuthToken != "" {
		cfg.AuthToken = c.AuthToken
	}
	if c.WatchProgressNotifyInterval > 0 {
		cfg.WatchProgressNotifyInterval = c.WatchProgressNotifyInterval
	}
	// etcd's default info logging would cost the reference CPU that kite
	// (started with --log-level warn) does not pay.
	cfg.LogLevel = "error"
	if c.Logger != nil {
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(c.Logger)
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("start embedded etcd: %w", err)
	}
	timeout := c.ReadyTimeout
	if timeout <= 0 {
		timeout = 60 * time.Second
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-e.Server.ReadyNotify():
		return e, nil
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded etcd failed while starting: %w", err)
	case <-t.C:
		e.Close()
		return nil, errors.New("embedded etcd not ready after " + timeout.String())
	case <-ctx.Done():
		e.Close()
		return nil, fmt.Errorf("start embedded etcd: %w", ctx.Err())
	}
}
