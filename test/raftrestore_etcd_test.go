package test

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/snapshot"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"
)

// TestRaftSQLRestoreEtcdSnapshot: a snapshot that etcdctl saved of a real
// etcd (history, a lease with keys, a compaction) is restored into a new
// 3-member raftsql cluster as etcdutl would restore it into a new etcd
// cluster: every member serves etcd's keys with all their fields at etcd's
// revision, etcd's compacted revision, the lease, and takes the next write
// at the next revision.
func TestRaftSQLRestoreEtcdSnapshot(t *testing.T) {
	if againstEtcd {
		t.Skip("kite snapshot restore")
	}
	es := startEtcd(t)
	ctx := testCtx(t, 2*time.Minute)
	for i := range 30 {
		if _, err := es.Client.Put(ctx, fmt.Sprintf("rs/%02d", i), fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := es.Client.Put(ctx, "rs/00", "again"); err != nil {
		t.Fatal(err)
	}
	del, err := es.Client.Delete(ctx, "rs/01")
	if err != nil {
		t.Fatal(err)
	}
	compacted := del.Header.Revision
	if _, err := es.Client.Compact(ctx, compacted, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	lease, err := es.Client.Grant(ctx, 900)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := es.Client.Put(ctx, "rs/leased", "x", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	if _, err := es.Client.Put(ctx, "rs/02", "later"); err != nil {
		t.Fatal(err)
	}
	want, err := es.Client.Get(ctx, "rs/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "etcd.snapshot")
	if _, err := snapshot.SaveWithVersion(ctx, zap.NewNop(), clientv3.Config{Endpoints: []string{es.Endpoint}, DialTimeout: 5 * time.Second}, file); err != nil {
		t.Fatalf("snapshot save: %v", err)
	}
	es.stop()

	restored := restoredCluster(t, file)
	for _, m := range restored.members {
		got, err := m.Client.Get(ctx, "rs/", clientv3.WithPrefix(), clientv3.WithSerializable())
		if err != nil {
			t.Fatal(err)
		}
		if got.Header.Revision != want.Header.Revision || !slices.EqualFunc(got.Kvs, want.Kvs,
			func(a, b *mvccpb.KeyValue) bool { return proto.Equal(a, b) }) {
			t.Fatalf("restored member %s: revision %d, keys %v; etcd: revision %d, keys %v",
				m.name, got.Header.Revision, got.Kvs, want.Header.Revision, want.Kvs)
		}
		if _, err := m.Client.Get(ctx, "rs/", clientv3.WithPrefix(), clientv3.WithSerializable(), clientv3.WithRev(compacted)); err != nil {
			t.Errorf("member %s: read at the compacted revision %d: %v", m.name, compacted, err)
		}
		if _, err := m.Client.Get(ctx, "rs/", clientv3.WithPrefix(), clientv3.WithSerializable(), clientv3.WithRev(compacted-1)); !errors.Is(err, rpctypes.ErrCompacted) {
			t.Errorf("member %s: read below the compacted revision: %v, want ErrCompacted", m.name, err)
		}
	}
	ttl, err := restored.members[1].Client.TimeToLive(ctx, lease.ID, clientv3.WithAttachedKeys())
	if err != nil || ttl.GrantedTTL != 900 || len(ttl.Keys) != 1 || string(ttl.Keys[0]) != "rs/leased" {
		t.Errorf("lease %x after the restore: %v %v; want TTL 900 with key rs/leased", lease.ID, ttl, err)
	}
	after := putEventually(t, restored.members[2], "rs/after", "x", 10*time.Second)
	if after.Header.Revision != want.Header.Revision+1 {
		t.Errorf("first write after the restore at revision %d; want %d", after.Header.Revision, want.Header.Revision+1)
	}
	waitApplied(t, restored, after.Header.Revision)
	sameHashKV(t, ctx, restored, after.Header.Revision)
}
