package test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/google/go-cmp/cmp"
)

// TestSnapshotSaveRestore: a snapshot saved by etcdctl from a running kite
// restores with `kite snapshot restore` into a new data dir, and kite started
// there serves the same keys, revisions and leases; a corrupted snapshot and
// an existing database are refused.
func TestSnapshotSaveRestore(t *testing.T) {
	if againstEtcd {
		t.Skip("kite's own snapshot restore: nothing to compare with in etcd-vs-etcd mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	k := startKite(t)
	lease, err := k.Client.Grant(ctx, 600)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range [][2]string{{"a", "1"}, {"b", "2"}, {"a", "3"}, {"c", "4"}} {
		if _, err := k.Client.Put(ctx, kv[0], kv[1]); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := k.Client.Put(ctx, "leased", "x", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Client.Delete(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	before := rangeAll(t, k.Client)

	file := filepath.Join(t.TempDir(), "snap.db")
	if out, err := ctl(t, k.Endpoint, "", "snapshot", "save", file); err != nil {
		t.Fatalf("etcdctl snapshot save: %v\n%s", err, out)
	}
	restored := filepath.Join(t.TempDir(), "restored")
	out, err := kiteCmd(ctx, "snapshot", "restore", "--data-dir", restored, file)
	if err != nil {
		t.Fatalf("kite snapshot restore: %v\n%s", err, out)
	}
	if want := "at revision " + strconv.FormatInt(before.Header.Revision, 10); !strings.Contains(out, want) {
		t.Errorf("restore output %q lacks %q", out, want)
	}
	if out, err := kiteCmd(ctx, "snapshot", "restore", "--data-dir", restored, file); err == nil || !strings.Contains(out, "already exists") {
		t.Errorf("restore over an existing database: err %v, output %q; want a refusal", err, out)
	}
	corrupt := filepath.Join(t.TempDir(), "corrupt.db")
	data, _ := os.ReadFile(file)
	data[len(data)/2] ^= 0xff
	if err := os.WriteFile(corrupt, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := kiteCmd(ctx, "snapshot", "restore", "--data-dir", filepath.Join(t.TempDir(), "x"), corrupt); err == nil || !strings.Contains(out, "checksum mismatch") {
		t.Errorf("restore of a corrupted snapshot: err %v, output %q; want a checksum error", err, out)
	}

	r := startKiteIn(t, restored)
	after := rangeAll(t, r.Client)
	before.Header, after.Header = nil, nil
	if diff := cmp.Diff(before, after, protocmp.Transform()); diff != "" {
		t.Errorf("restored data differs (-saved +restored):\n%s", diff)
	}
	if st, err := r.Client.Status(ctx, r.Endpoint); err != nil || st.Header.Revision != k.mustRev(t) {
		t.Errorf("restored revision: %v %v, want %d", st, err, k.mustRev(t))
	}
	ttl, err := r.Client.TimeToLive(ctx, lease.ID, clientv3.WithAttachedKeys())
	if err != nil || ttl.TTL <= 0 || len(ttl.Keys) != 1 || string(ttl.Keys[0]) != "leased" {
		t.Errorf("restored lease: %+v %v, want it alive with key 'leased'", ttl, err)
	}

	// kite's own `snapshot save` writes the same format etcdctl does.
	own := filepath.Join(t.TempDir(), "own.db")
	if out, err := kiteCmd(ctx, "snapshot", "save", "--endpoints", r.Endpoint, own); err != nil {
		t.Fatalf("kite snapshot save: %v\n%s", err, out)
	}
	if out, err := kiteCmd(ctx, "snapshot", "restore", "--data-dir", filepath.Join(t.TempDir(), "again"), own); err != nil {
		t.Fatalf("restore of kite's own snapshot: %v\n%s", err, out)
	}
}

func rangeAll(t *testing.T, c *clientv3.Client) *pb.RangeResponse {
	t.Helper()
	resp, err := pb.NewKVClient(c.ActiveConnection()).Range(context.Background(), &pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}})
	if err != nil {
		t.Fatalf("range all: %v", err)
	}
	return resp
}

func (k *kiteProcess) mustRev(t *testing.T) int64 {
	t.Helper()
	return rangeAll(t, k.Client).Header.Revision
}

func kiteCmd(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, kiteBin, args...).CombinedOutput()
	return string(out), err
}
