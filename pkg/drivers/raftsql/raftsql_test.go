package raftsql

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/types"
	etcdmembership "go.etcd.io/etcd/server/v3/etcdserver/api/membership"
	"go.uber.org/zap"

	"github.com/kite-db/kite/pkg/membership"
	"github.com/kite-db/kite/pkg/mvcc"
	"github.com/kite-db/kite/pkg/mvcc/backendtest"
)

// oneMember is the bootstrap of a single-member cluster in dir. It packs
// proposals (--raft-pack-proposals), so the driver suites run over packed
// entries; the kite binary's suites in test/ run without.
func oneMember(dir string) Config {
	return Config{Name: "m", DataDir: dir, ListenPeer: []string{"http://127.0.0.1:0"},
		InitialCluster: map[string][]string{"m": {"http://127.0.0.1:2380"}}, PackProposals: true}
}

// oneMemberOpeners starts single-member clusters in fresh directories, and
// restarts one from its WAL and SQLite file, for the suites that restart
// their storage; behind sets Config.ApplyBehind.
func oneMemberOpeners(behind bool) (open func(t *testing.T) mvcc.Backend, reopen func(t *testing.T, b mvcc.Backend) mvcc.Backend) {
	config := func(dir string) Config {
		c := oneMember(dir)
		c.ApplyBehind = behind
		return c
	}
	open = func(t *testing.T) mvcc.Backend {
		n, err := Open(context.Background(), config(t.TempDir()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		return n
	}
	reopen = func(t *testing.T, b mvcc.Backend) mvcc.Backend {
		dir := b.(*Node).cfg.DataDir
		if err := b.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		n, err := Open(context.Background(), config(dir))
		if err != nil {
			t.Fatalf("reopen: %v", err)
		}
		t.Cleanup(func() { n.Close() })
		return n
	}
	return open, reopen
}

// TestConformance: a member's storage is the shared driver suite's Backend
// (the local SQLite behind the holder a received snapshot swaps), before
// and after a restart from its WAL.
func TestConformance(t *testing.T) {
	for _, behind := range []bool{false, true} {
		t.Run(fmt.Sprintf("apply behind %v", behind), func(t *testing.T) {
			open, reopen := oneMemberOpeners(behind)
			backendtest.Run(t, open, backendtest.WithReopen(reopen))
		})
	}
}

// TestIDsAreEtcds: member and cluster IDs are computed as etcd computes
// them from the same --initial-cluster and token, so tools that know a
// cluster's IDs see the same ones.
func TestIDsAreEtcds(t *testing.T) {
	initial := "a=http://127.0.0.1:2380,b=http://127.0.0.1:12380,c=http://127.0.0.1:22380,c=http://10.0.0.3:2380"
	cluster, err := ParseInitialCluster(initial)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Name: "a", InitialCluster: cluster, Token: "tok"}
	urlsmap, err := types.NewURLsMap(initial)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := etcdmembership.NewClusterFromURLsMap(zap.NewNop(), "tok", urlsmap)
	if err != nil {
		t.Fatal(err)
	}
	var ids []uint64
	for _, m := range cfg.initialMembers() {
		em := ref.MemberByName(m.Name)
		if em == nil || uint64(em.ID) != m.ID {
			t.Errorf("member %s: ID %x; etcd's %v", m.Name, m.ID, em)
		}
		ids = append(ids, m.ID)
	}
	if got, want := membership.ClusterID(ids...), uint64(ref.ID()); got != want {
		t.Errorf("cluster ID %x; etcd's %x", got, want)
	}
}

// TestBootstrapRefused: etcd's checks of a new member's bootstrap.
func TestBootstrapRefused(t *testing.T) {
	base := func() Config {
		c := Config{Name: "a", InitialCluster: map[string][]string{
			"a": {"http://127.0.0.1:2380"}, "b": {"http://127.0.0.1:12380"}}}
		c.setDefaults()
		return c
	}
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"name not in cluster", func(c *Config) { c.Name = "x" }, `couldn't find local name "x"`},
		{"advertise differs", func(c *Config) { c.AdvertisePeer = []string{"http://127.0.0.1:9"} }, "missing from --initial-advertise-peer-urls"},
		{"duplicate URL", func(c *Config) { c.InitialCluster["b"] = []string{"http://127.0.0.1:2380"} }, "duplicate url"},
		{"bad URL", func(c *Config) { c.InitialCluster["b"] = []string{"127.0.0.1:12380"} }, "invalid peer URL"},
		{"bad state", func(c *Config) { c.ClusterState = "old" }, "--initial-cluster-state"},
		{"short election", func(c *Config) { c.Election = 2 * c.Heartbeat }, "at least 5 times"},
	} {
		c := base()
		tc.change(&c)
		err := CheckBootstrap(t.TempDir(), c)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want an error with %q", tc.name, err, tc.want)
		}
	}
	if err := CheckBootstrap(t.TempDir(), base()); err != nil {
		t.Errorf("a good bootstrap refused: %v", err)
	}
}

// TestStartRefusesBadPeerURLs: a member whose own peer URLs do not parse
// fails to start with the reason, instead of handing raft's transport no
// URLs at all.
func TestStartRefusesBadPeerURLs(t *testing.T) {
	if _, err := peerURLs([]string{"http://127.0.0.1:2380"}); err != nil {
		t.Fatalf("good URL refused: %v", err)
	}
	n, err := Open(context.Background(), oneMember(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	// Input the bootstrap checks would refuse, as a WAL written by
	// another version might still hold.
	n.cluster.mu.Lock()
	n.cluster.bootstrap[0].PeerURLs = []string{"127.0.0.1:2380"}
	n.cluster.mu.Unlock()
	err = n.Start(nil)
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:2380") {
		t.Fatalf("Start with an unparsable peer URL: %v; want an error naming it", err)
	}
	if n.node != nil {
		t.Fatal("raft started despite the error")
	}
}

// Applied behind the WAL, the local database commits once per flush and is
// checkpointed at most once a second (applyBehindCheckpointInterval); the
// synchronous apply keeps the driver's default, and a caller's own
// interval is kept in both.
func TestLocalDBCheckpointInterval(t *testing.T) {
	for _, c := range []struct {
		behind bool
		given  time.Duration
		want   time.Duration
	}{{false, 0, 0}, {true, 0, applyBehindCheckpointInterval}, {true, 5 * time.Second, 5 * time.Second}} {
		cfg := Config{ApplyBehind: c.behind}
		cfg.SQLite.CheckpointInterval = c.given
		if got := localDBOptions(cfg).CheckpointInterval; got != c.want {
			t.Errorf("ApplyBehind %v, CheckpointInterval %v: local database's %v, want %v", c.behind, c.given, got, c.want)
		}
	}
}
