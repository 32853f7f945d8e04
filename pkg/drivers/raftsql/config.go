// Package raftsql is kite's replicated storage: every node of a 3- or
// 5-node cluster runs go.etcd.io/raft/v3 with etcd's own WAL and snapshot
// packages and etcd's peer transport, and applies the committed write
// requests into its own SQLite database with the same pkg/mvcc code as the
// single-node mode. The Node is an mvcc.Backend (the local SQLite) that is
// also an mvcc.Replicator (the log that orders writes before they apply).
//
//	member/wal     raft log (etcd's WAL)
//	member/snap    raft snapshots; a received database arrives here first
//	kite.db        the applied state, with the index of the last applied entry
package raftsql

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/server/v3/storage/wal"

	"github.com/kite-db/kite/pkg/drivers/sqlite"
	"github.com/kite-db/kite/pkg/membership"
)

// Config is a member's bootstrap, in etcd's terms and with etcd's flag
// names in the comments.
type Config struct {
	Name    string // --name
	DataDir string // --data-dir
	// InitialCluster maps member names to peer URLs (--initial-cluster).
	InitialCluster map[string][]string
	// ClusterState is "new" or "existing" (--initial-cluster-state).
	ClusterState  string
	Token         string   // --initial-cluster-token
	ListenPeer    []string // --listen-peer-urls
	AdvertisePeer []string // --initial-advertise-peer-urls
	// AdvertiseClient is published to the other members (MemberList).
	AdvertiseClient []string
	Heartbeat       time.Duration // --heartbeat-interval
	Election        time.Duration // --election-timeout
	SnapshotCount   uint64        // --snapshot-count
	MaxSnapshots    int           // --max-snapshots
	MaxWALs         int           // --max-wals
	// CatchUpEntries is how many applied entries a member keeps in its
	// log after a snapshot, so a follower a little behind catches up from
	// the log instead of receiving a whole database
	// (--snapshot-catchup-entries).
	CatchUpEntries uint64
	// SnapshotBytes also starts a snapshot once the entries applied since
	// the last one hold this many bytes (64 MiB), and CatchUpBytes bounds
	// the entries kept after it (16 MiB): etcd counts requests only, so a
	// load of large values keeps up to --snapshot-count of them in memory
	// (10,000 puts of 1 MiB: 10 GiB). A snapshot here costs a sync of the
	// database and no copy of it (snapshot.go), so bounding the log by
	// its size is cheap. Not flags: no etcd flag says this.
	SnapshotBytes, CatchUpBytes uint64
	// MaxRequestBytes bounds one proposal (--max-request-bytes); raft's
	// messages are sized from it as etcd sizes them.
	MaxRequestBytes int
	// CorruptCheckInterval is how often the leader compares its HashKV
	// with the other members' (etcd's --corrupt-check-time); the first
	// check runs shortly after start.
	CorruptCheckInterval time.Duration
	// PeerTLS secures the peer URLs (tls.go).
	PeerTLS PeerTLS
	// TestFaults turns on the fault hooks tests use to make a member's
	// apply fail. Its type has a field only in a -tags kitetest build
	// (faults_testhooks.go); in a release build it is empty, so nothing can
	// turn the hooks on.
	TestFaults TestFaults
	// SQLite tunes the member's database (page caches and mappings); its
	// Logger and NoCommitSync are set by the member.
	SQLite sqlite.Options
	// ApplyBehind applies committed entries into memory (pkg/mvcc/memtail)
	// and moves them into SQLite in large transactions behind the apply,
	// instead of one SQLite commit per apply batch before the client is
	// answered: the raft WAL already makes them durable, and the WAL is
	// released only once SQLite holds them synced (--raft-apply-behind,
	// kite's default: it measured ahead, docs/benchmarks.md).
	ApplyBehind bool
	// PackProposals proposes the requests this member's clients send
	// while its previous proposal is under way as one raft entry
	// (pack.go), instead of one entry per request (--raft-pack-proposals,
	// off: not measurably faster yet, docs/benchmarks.md). Every member
	// must be able to read packed entries: all of a cluster's members run
	// a kite that has this field, whether or not they set it.
	PackProposals bool
	// RowCacheBytes bounds, with ApplyBehind, the applier's cache of the
	// newest rows (memtail.Options.RowCacheBytes; 0: memtail's default).
	RowCacheBytes int64
	Logger        *slog.Logger
}

// Defaults are etcd's.
const (
	DefaultHeartbeat      = 100 * time.Millisecond
	DefaultElection       = 1000 * time.Millisecond
	DefaultSnapshotCount  = 10000
	DefaultMaxSnapshots   = 5
	DefaultMaxWALs        = 5
	DefaultCatchUpEntries = 5000
	DefaultSnapshotBytes  = 64 << 20
	DefaultCatchUpBytes   = 16 << 20
)

func (c *Config) setDefaults() {
	if c.Heartbeat == 0 {
		c.Heartbeat = DefaultHeartbeat
	}
	if c.Election == 0 {
		c.Election = DefaultElection
	}
	if c.SnapshotCount == 0 {
		c.SnapshotCount = DefaultSnapshotCount
	}
	if c.CatchUpEntries == 0 {
		c.CatchUpEntries = DefaultCatchUpEntries
	}
	if c.SnapshotBytes == 0 {
		c.SnapshotBytes = DefaultSnapshotBytes
	}
	if c.CatchUpBytes == 0 {
		c.CatchUpBytes = DefaultCatchUpBytes
	}
	if c.MaxSnapshots == 0 {
		c.MaxSnapshots = DefaultMaxSnapshots
	}
	if c.MaxWALs == 0 {
		c.MaxWALs = DefaultMaxWALs
	}
	if c.MaxRequestBytes == 0 {
		c.MaxRequestBytes = 1572864
	}
	if c.CorruptCheckInterval == 0 {
		c.CorruptCheckInterval = 5 * time.Minute
	}
	if c.ClusterState == "" {
		c.ClusterState = "new"
	}
	if c.Token == "" {
		c.Token = "etcd-cluster" // etcd's default token
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// validate applies etcd's bootstrap checks, before anything is written.
func (c *Config) validate() error {
	if c.ClusterState != "new" && c.ClusterState != "existing" {
		return fmt.Errorf("invalid --initial-cluster-state %q (want new or existing)", c.ClusterState)
	}
	if c.Heartbeat <= 0 || c.Election < 5*c.Heartbeat {
		return fmt.Errorf("--election-timeout[%v] should be at least 5 times as --heartbeat-interval[%v]", c.Election, c.Heartbeat)
	}
	if len(c.InitialCluster) == 0 {
		return errors.New("--initial-cluster is empty")
	}
	own, ok := c.InitialCluster[c.Name]
	if !ok {
		return fmt.Errorf("couldn't find local name %q in the initial cluster configuration", c.Name)
	}
	if len(c.AdvertisePeer) > 0 {
		if ok, err := sameResolvedURLs(context.Background(), c.Logger, own, c.AdvertisePeer); !ok {
			msg := fmt.Sprintf("--initial-cluster has %s=%s but missing from --initial-advertise-peer-urls=%s",
				c.Name, strings.Join(own, ","), strings.Join(c.AdvertisePeer, ","))
			if err != nil {
				return fmt.Errorf("%s (%w)", msg, err)
			}
			return errors.New(msg)
		}
	}
	seen := map[string]string{}
	for name, urls := range c.InitialCluster {
		if len(urls) == 0 {
			return fmt.Errorf("member %q of --initial-cluster has no peer URL", name)
		}
		for _, u := range urls {
			pu, err := url.Parse(u)
			if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Port() == "" {
				return fmt.Errorf("--initial-cluster: member %q: invalid peer URL %q (want http(s)://host:port)", name, u)
			}
			if other, dup := seen[u]; dup {
				return fmt.Errorf("--initial-cluster has duplicate url for %s and %s: %s", other, name, u)
			}
			seen[u] = name
		}
	}
	return nil
}

// member is one member of the cluster as this node knows it.
type member struct {
	ID         uint64   `json:"id"`
	Name       string   `json:"name"`
	PeerURLs   []string `json:"peerURLs"`
	ClientURLs []string `json:"clientURLs,omitempty"`
	IsLearner  bool     `json:"isLearner,omitempty"`
}

// initialMembers lists the members of --initial-cluster in ID order.
func (c *Config) initialMembers() []member {
	var ms []member
	for name, urls := range c.InitialCluster {
		ms = append(ms, member{ID: membership.MemberID(urls, c.Token), Name: name, PeerURLs: slices.Clone(urls)})
	}
	slices.SortFunc(ms, func(a, b member) int { return cmp.Compare(a.ID, b.ID) })
	return ms
}

// ParseInitialCluster parses etcd's --initial-cluster syntax:
// name=url,name=url (a name may repeat, for a member with several URLs).
func ParseInitialCluster(s string) (map[string][]string, error) {
	m := map[string][]string{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, u, ok := strings.Cut(part, "=")
		if !ok || name == "" || u == "" {
			return nil, fmt.Errorf("--initial-cluster: %q is not name=url", part)
		}
		m[name] = append(m[name], u)
	}
	return m, nil
}

// CheckBootstrap applies the checks Open applies to a new member's
// bootstrap, without writing anything: a member that has a WAL in dataDir
// restarts from it, and its checks need the WAL.
func CheckBootstrap(dataDir string, cfg Config) error {
	if wal.Exist(filepath.Join(dataDir, "member", "wal")) {
		return nil
	}
	cfg.setDefaults()
	return cfg.validate()
}
