package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/kite-db/kite/pkg/datastore"
	"github.com/kite-db/kite/pkg/drivers/mysql/mysqltest"
	"github.com/kite-db/kite/pkg/mvcc"
)

func TestParseCopyFlags(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		name    string
		args    []string
		wantErr string // "" means accepted
		check   func(t *testing.T, c copyConfig)
	}{
		{name: "sqlite to postgres",
			args: []string{"--from", "sqlite://" + dir + "/a.db", "--to", "postgres://u:secret@h/db"},
			check: func(t *testing.T, c copyConfig) {
				if c.from != "sqlite://"+dir+"/a.db" || c.to != "postgres://u:secret@h/db" || c.fromEtcd != nil || c.force {
					t.Errorf("config %+v", c)
				}
			}},
		{name: "data dirs",
			args: []string{"--from-data-dir", dir + "/a", "--to-data-dir", dir + "/b", "--force"},
			check: func(t *testing.T, c copyConfig) {
				if c.from != "sqlite://"+filepath.Join(dir, "a", "kite.db") || c.to != "sqlite://"+filepath.Join(dir, "b", "kite.db") ||
					c.toDataDir != dir+"/b" || !c.force {
					t.Errorf("config %+v", c)
				}
			}},
		{name: "etcd endpoints with TLS and user",
			args: []string{"--from", "https://a:2379, https://b:2379", "--to-data-dir", dir, "--cacert", "ca.pem",
				"--cert", "c.pem", "--key", "k.pem", "--user", "root:pw", "--page-size", "7"},
			check: func(t *testing.T, c copyConfig) {
				if strings.Join(c.fromEtcd, ",") != "https://a:2379,https://b:2379" || c.tls.TrustedCAFile != "ca.pem" ||
					c.tls.CertFile != "c.pem" || c.tls.KeyFile != "k.pem" || c.user != "root" || c.password != "pw" || c.pageSize != 7 {
					t.Errorf("config %+v", c)
				}
			}},
		{name: "unix socket source", args: []string{"--from", "unix:///run/kine.sock", "--to", "sqlite://" + dir + "/x.db"},
			check: func(t *testing.T, c copyConfig) {
				if len(c.fromEtcd) != 1 || c.fromEtcd[0] != "unix:///run/kine.sock" {
					t.Errorf("config %+v", c)
				}
			}},
		{name: "snapshot file source", args: []string{"--from-snapshot", dir + "/etcd.snapshot", "--to", "sqlite://" + dir + "/x.db"},
			check: func(t *testing.T, c copyConfig) {
				if c.fromSnapshot != dir+"/etcd.snapshot" || c.from != "" || c.fromEtcd != nil {
					t.Errorf("config %+v", c)
				}
			}},
		{name: "snapshot and another source", args: []string{"--from-snapshot", "s.db", "--from", "sqlite://a.db", "--to", "sqlite://x.db"}, wantErr: "exactly one of --from"},
		{name: "TLS with a snapshot source", args: []string{"--from-snapshot", "s.db", "--to", "sqlite://x.db", "--cacert", "ca.pem"}, wantErr: "only to an etcd endpoint"},
		{name: "no source", args: []string{"--to", "sqlite://x.db"}, wantErr: "exactly one of --from"},
		{name: "two sources", args: []string{"--from", "sqlite://a.db", "--from-data-dir", "d", "--to", "sqlite://x.db"}, wantErr: "exactly one of --from"},
		{name: "no target", args: []string{"--from", "sqlite://a.db"}, wantErr: "exactly one of --to"},
		{name: "server target", args: []string{"--from", "sqlite://a.db", "--to", "http://u:secret@127.0.0.1:2379"}, wantErr: "must be a kite storage"},
		{name: "unknown scheme", args: []string{"--from", "mongodb://u:secret@h/db", "--to", "sqlite://x.db"}, wantErr: "unknown scheme"},
		{name: "empty sqlite path", args: []string{"--from", "sqlite://", "--to", "sqlite://x.db"}, wantErr: "want sqlite://PATH"},
		{name: "another file in the target dir", args: []string{"--from", "sqlite://" + dir + "/a.db", "--to-data-dir", dir, "--force"}, wantErr: ""},
		{name: "same file really", args: []string{"--from", "sqlite://" + dir + "/kite.db", "--to-data-dir", dir}, wantErr: "the same storage"},
		{name: "same postgres", args: []string{"--from", "postgres://u:secret@h/db", "--to", "postgres://u:secret@h/db"}, wantErr: "the same storage"},
		{name: "TLS with a store source", args: []string{"--from", "sqlite://a.db", "--to", "sqlite://x.db", "--cacert", "ca.pem"}, wantErr: "only to an etcd endpoint"},
		{name: "cert without key", args: []string{"--from", "https://a:2379", "--to", "sqlite://x.db", "--cert", "c.pem"}, wantErr: "--cert and --key"},
		{name: "password twice", args: []string{"--from", "http://a:2379", "--to", "sqlite://x.db", "--user", "a:b", "--password", "c"}, wantErr: "given twice"},
		{name: "mixed endpoint list", args: []string{"--from", "http://a:2379,postgres://h/db", "--to", "sqlite://x.db"}, wantErr: "every URL"},
		{name: "positional", args: []string{"--from", "sqlite://a.db", "--to", "sqlite://x.db", "extra"}, wantErr: "unexpected argument"},
		{name: "bad page size", args: []string{"--from", "http://a:2379", "--to", "sqlite://x.db", "--page-size", "0"}, wantErr: "--page-size"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseCopyFlags(tt.args, io.Discard)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("parse %q: %v", tt.args, err)
				}
				if tt.check != nil {
					tt.check(t, c)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("parse %q: error %v, want one containing %q", tt.args, err, tt.wantErr)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("error shows a password: %v", err)
			}
		})
	}
	var out bytes.Buffer
	if _, err := parseCopyFlags([]string{"--help"}, &out); !errors.Is(err, flag.ErrHelp) || !strings.Contains(out.String(), "--force the target is emptied") {
		t.Errorf("--help: %v, usage %q", err, out.String())
	}
}

// fillStore writes a history into a new SQLite kite database at path
// through a Store: puts, a delete, a txn, a lease with keys, a compaction.
// It returns the lease's ID.
func fillStore(t *testing.T, path string, keys int) int64 {
	t.Helper()
	ctx := context.Background()
	b, err := datastore.Open(ctx, datastore.Config{Endpoint: "sqlite://" + path})
	if err != nil {
		t.Fatal(err)
	}
	s, err := mvcc.Open(ctx, b, mvcc.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		s.Close()
		b.Close()
	}()
	put := func(k, v string, lease int64) {
		t.Helper()
		if _, err := s.Put(ctx, &pb.PutRequest{Key: []byte(k), Value: []byte(v), Lease: lease}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range keys {
		put(fmt.Sprintf("k%04d", i), "v1", 0)
	}
	put("k0000", "v2", 0)
	if _, err := s.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte("k0001")}); err != nil {
		t.Fatal(err)
	}
	mid, _ := s.Revisions()
	if _, err := s.Compact(ctx, &pb.CompactionRequest{Revision: mid - 1, Physical: true}); err != nil {
		t.Fatal(err)
	}
	l, err := s.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: 600})
	if err != nil {
		t.Fatal(err)
	}
	put("leased/a", "x", l.ID)
	put("leased/b", "y", l.ID)
	if _, err := s.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{
		{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("t1"), Value: []byte("1")}}},
		{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("t2"), Value: []byte("2")}}},
		{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte("k0002")}}},
	}}); err != nil {
		t.Fatal(err)
	}
	return l.ID
}

// dump is the whole content of a storage: revisions, every log row, leases.
func dump(t *testing.T, endpoint string) string {
	t.Helper()
	ctx := context.Background()
	b, err := datastore.Open(ctx, datastore.Config{Endpoint: endpoint})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	tx, err := b.BeginRead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	cur, comp, err := tx.Revisions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "revision %d compacted %d\n", cur, comp)
	rows, err := tx.Changes(ctx, 0, cur, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		fmt.Fprintf(&sb, "%d/%d deleted=%v %v\n", r.KV.ModRevision, r.Sub, r.Deleted, r.KV.String())
	}
	leases, err := tx.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&sb, "leases %v\n", leases)
	return sb.String()
}

func testCopyConfig(t *testing.T, args ...string) copyConfig {
	t.Helper()
	c, err := parseCopyFlags(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	c.progressEvery = 10 * time.Millisecond
	return c
}

// TestCopyStoreToStore copies a SQLite kite with history into a data dir,
// refuses to copy again over it, and with --force replaces a target that
// holds other data with an exact copy.
func TestCopyStoreToStore(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	src := filepath.Join(dir, "src.db")
	lease := fillStore(t, src, 50)
	want := dump(t, "sqlite://"+src)

	var log bytes.Buffer
	res, err := copyCluster(ctx, testCopyConfig(t, "--from", "sqlite://"+src, "--to-data-dir", filepath.Join(dir, "dst")), &log)
	if err != nil {
		t.Fatalf("copy: %v\n%s", err, log.String())
	}
	dst := "sqlite://" + filepath.Join(dir, "dst", "kite.db")
	if got := dump(t, dst); got != want {
		t.Fatalf("copy differs:\n--- source\n%s\n--- target\n%s", want, got)
	}
	if res.keys != 52 || res.leases != 1 || len(res.sum) != 64 || !strings.Contains(log.String(), "rows/s") {
		t.Errorf("result %+v, log %q", res, log.String())
	}
	if !strings.Contains(res.summary(), fmt.Sprintf("%d keys at revision %d, sha256 %s", res.keys, res.current, res.sum)) {
		t.Errorf("summary %q", res.summary())
	}
	_ = lease

	// Again, without --force: refused, target untouched.
	_, err = copyCluster(ctx, testCopyConfig(t, "--from", "sqlite://"+src, "--to", dst), io.Discard)
	if !errors.Is(err, errNotEmpty) || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("copy over a non-empty target: %v, want a refusal naming --force", err)
	}

	// A target with other, longer history is replaced by --force.
	other := filepath.Join(dir, "other.db")
	fillStore(t, other, 200)
	if _, err := copyCluster(ctx, testCopyConfig(t, "--from", "sqlite://"+src, "--to", "sqlite://"+other), io.Discard); !errors.Is(err, errNotEmpty) {
		t.Fatalf("copy over other data: %v, want a refusal", err)
	}
	if _, err := copyCluster(ctx, testCopyConfig(t, "--from", "sqlite://"+src, "--to", "sqlite://"+other, "--force"), io.Discard); err != nil {
		t.Fatalf("copy --force: %v", err)
	}
	if got := dump(t, "sqlite://"+other); got != want {
		t.Fatalf("copy --force differs:\n--- source\n%s\n--- target\n%s", want, got)
	}

	// A missing source is an error, and is not created.
	missing := filepath.Join(dir, "missing.db")
	if _, err := copyCluster(ctx, testCopyConfig(t, "--from", "sqlite://"+missing, "--to", "sqlite://"+filepath.Join(dir, "y.db")), io.Discard); err == nil {
		t.Fatal("copy from a missing file succeeded")
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Errorf("missing source was created: %v", err)
	}
}

// TestCopyStoreMySQL copies a SQLite kite with history into MySQL and
// from there into SQLite again: every log row, the revisions and the
// leases come through both copies unchanged.
func TestCopyStoreMySQL(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	src := filepath.Join(dir, "src.db")
	fillStore(t, src, 50)
	want := dump(t, "sqlite://"+src)

	my := mysqltest.NewDatabase(t)
	if _, err := copyCluster(ctx, testCopyConfig(t, "--from", "sqlite://"+src, "--to", my), io.Discard); err != nil {
		t.Fatalf("copy to MySQL: %v", err)
	}
	if got := dump(t, my); got != want {
		t.Fatalf("MySQL copy differs:\n--- source\n%s\n--- target\n%s", want, got)
	}
	back := "sqlite://" + filepath.Join(dir, "back.db")
	if _, err := copyCluster(ctx, testCopyConfig(t, "--from", my, "--to", back), io.Discard); err != nil {
		t.Fatalf("copy from MySQL: %v", err)
	}
	if got := dump(t, back); got != want {
		t.Fatalf("copy from MySQL differs:\n--- source\n%s\n--- target\n%s", want, got)
	}
}
