package test

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestRaftSQLRestoreNewCluster: a snapshot of one member of a cluster is
// restored, with `kite snapshot restore --name --initial-cluster
// --initial-cluster-token --initial-advertise-peer-urls`, into the data
// dirs of a NEW 3-member cluster (other peer URLs, other token), as
// etcdutl snapshot restore does: every member starts with the snapshot's
// keys at their revisions, the new members' IDs, and takes writes after
// the snapshot's revision.
func TestRaftSQLRestoreNewCluster(t *testing.T) {
	if againstEtcd {
		t.Skip("kite snapshot restore")
	}
	old := startCluster(t, 3)
	ctx := testCtx(t, 2*time.Minute)
	for i := range 50 {
		putEventually(t, old.members[i%3], fmt.Sprintf("rs/%02d", i), fmt.Sprint(i), 10*time.Second)
	}
	want, err := old.members[0].Client.Get(ctx, "rs/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "snap.db")
	if out, err := exec.Command(kiteBin, "snapshot", "save", "--endpoints", old.members[1].Endpoint, file).CombinedOutput(); err != nil {
		t.Fatalf("kite snapshot save: %v\n%s", err, out)
	}
	// kite snapshot status: the snapshot's hash is the cluster's HashKV.
	out, err := exec.Command(kiteBin, "snapshot", "status", "-w", "json", file).Output()
	if err != nil {
		t.Fatalf("kite snapshot status: %v", err)
	}
	var st struct {
		Hash      uint32 `json:"hash"`
		Revision  int64  `json:"revision"`
		TotalKeys int64  `json:"totalKey"`
		TotalSize int64  `json:"totalSize"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("kite snapshot status -w json: %v\n%s", err, out)
	}
	hk, err := old.members[0].Maint.HashKV(ctx, &pb.HashKVRequest{Revision: want.Header.Revision})
	if err != nil {
		t.Fatal(err)
	}
	if st.Revision != want.Header.Revision || st.Hash != hk.Hash || st.TotalKeys != int64(len(want.Kvs)) || st.TotalSize == 0 {
		t.Errorf("snapshot status %+v; want revision %d, hash %d, %d keys", st, want.Header.Revision, hk.Hash, len(want.Kvs))
	}
	oldIDs := map[uint64]bool{}
	for _, m := range old.members {
		oldIDs[m.memberID(t)] = true
		m.Kill()
	}

	restored := restoredCluster(t, file)
	for _, m := range restored.members {
		if oldIDs[m.memberID(t)] {
			t.Errorf("restored member %s kept an ID of the old cluster", m.name)
		}
		got, err := m.Client.Get(ctx, "rs/", clientv3.WithPrefix(), clientv3.WithSerializable())
		if err != nil {
			t.Fatal(err)
		}
		if got.Header.Revision != want.Header.Revision || !slices.EqualFunc(got.Kvs, want.Kvs,
			func(a, b *mvccpb.KeyValue) bool {
				return string(a.Key) == string(b.Key) && string(a.Value) == string(b.Value) &&
					a.ModRevision == b.ModRevision && a.CreateRevision == b.CreateRevision && a.Version == b.Version
			}) {
			t.Fatalf("restored member %s: revision %d, %d keys; want revision %d, %d keys as before",
				m.name, got.Header.Revision, len(got.Kvs), want.Header.Revision, len(want.Kvs))
		}
	}
	after := putEventually(t, restored.members[2], "rs/after", "x", 10*time.Second)
	if after.Header.Revision != want.Header.Revision+1 {
		t.Errorf("first write after the restore at revision %d; want %d", after.Header.Revision, want.Header.Revision+1)
	}
	waitApplied(t, restored, after.Header.Revision)
	sameHashKV(t, ctx, restored, after.Header.Revision)
}

// restoredCluster starts a NEW 3-member cluster whose members' data dirs
// `kite snapshot restore` made from file, as etcdutl restores one.
func restoredCluster(t *testing.T, file string) *cluster {
	t.Helper()
	return startClusterOf(t, 3, &cluster{prepare: func(c *cluster, m *clusterMember) {
		out, err := exec.Command(kiteBin, "snapshot", "restore", "--data-dir", m.dataDir, "--name", m.name,
			"--initial-cluster", c.initialCluster(), "--initial-cluster-token", c.token,
			"--initial-advertise-peer-urls", m.peerURL, file).CombinedOutput()
		if err != nil {
			t.Fatalf("kite snapshot restore for %s: %v\n%s", m.name, err, out)
		}
	}})
}
