package test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/kite-db/kite/internal/testenv"
	"github.com/kite-db/kite/pkg/drivers/postgres/pgtest"
	"github.com/kite-db/kite/pkg/server/tlstest"
)

// copyHistory writes a history into s: puts, overwrites, a delete, a txn,
// a lease with two keys, a physical compaction, and writes after it. It
// returns the compacted revision.
func copyHistory(t *testing.T, ctx context.Context, s *server, keys int) int64 {
	t.Helper()
	for i := range keys {
		if _, err := s.Client.Put(ctx, fmt.Sprintf("k/%04d", i), strings.Repeat("v", i%50)); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"k/0000", "k/0001", "k/0000"} {
		if _, err := s.Client.Put(ctx, k, "again"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Client.Delete(ctx, "k/0002"); err != nil {
		t.Fatal(err)
	}
	resp, err := s.Client.Put(ctx, "k/0003", "before compaction")
	if err != nil {
		t.Fatal(err)
	}
	compacted := resp.Header.Revision
	if _, err := s.Client.Compact(ctx, compacted, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	l, err := s.Client.Grant(ctx, 600)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"leased/a", "leased/b"} {
		if _, err := s.Client.Put(ctx, k, "x", clientv3.WithLease(l.ID)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Client.Txn(ctx).Then(
		clientv3.OpPut("t/1", "1"), clientv3.OpPut("t/2", "2"), clientv3.OpDelete("k/0004"),
	).Commit(); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"k/0003", "k/0005", "t/1"} {
		if _, err := s.Client.Put(ctx, k, "after compaction"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Client.Delete(ctx, "k/0006"); err != nil {
		t.Fatal(err)
	}
	return compacted
}

// rangeAt reads every key at rev (0: latest).
func rangeAt(ctx context.Context, s *server, rev int64) (*pb.RangeResponse, error) {
	return s.KV.Range(ctx, &pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, Revision: rev})
}

// sameStorage compares two kites that should hold the same log: every key
// at every revision from compacted to current, the refusal below
// compacted, HashKV, and the leases with their keys.
func sameStorage(t *testing.T, ctx context.Context, want, got *server, compacted int64) {
	t.Helper()
	w, err := rangeAt(ctx, want, 0)
	if err != nil {
		t.Fatal(err)
	}
	current := w.Header.Revision
	for rev := compacted; rev <= current; rev++ {
		a, errA := rangeAt(ctx, want, rev)
		b, errB := rangeAt(ctx, got, rev)
		if errA != nil || errB != nil {
			t.Fatalf("range at %d: source %v, copy %v", rev, errA, errB)
		}
		if a.Header.Revision != b.Header.Revision {
			t.Errorf("range at %d: header revision %d on the source, %d on the copy", rev, a.Header.Revision, b.Header.Revision)
		}
		a.Header, b.Header = nil, nil
		if diff := cmp.Diff(a, b, protocmp.Transform()); diff != "" {
			t.Fatalf("range at %d differs (-source +copy):\n%s", rev, diff)
		}
	}
	if compacted > 1 {
		if _, err := rangeAt(ctx, got, compacted-1); !isCompacted(err) {
			t.Errorf("range below the compacted revision on the copy: %v, want ErrCompacted", err)
		}
	}
	ha, errA := want.Maint.HashKV(ctx, &pb.HashKVRequest{})
	hb, errB := got.Maint.HashKV(ctx, &pb.HashKVRequest{})
	if errA != nil || errB != nil || ha.Hash != hb.Hash || ha.CompactRevision != hb.CompactRevision || ha.HashRevision != hb.HashRevision {
		t.Errorf("HashKV: source %v %v, copy %v %v", ha, errA, hb, errB)
	}
	sameLeases(t, ctx, want, got)
}

func isCompacted(err error) bool {
	return err != nil && strings.Contains(err.Error(), rpctypes.ErrCompacted.Error())
}

// sameLeases compares the leases of two servers: IDs, granted TTLs and
// attached keys.
func sameLeases(t *testing.T, ctx context.Context, want, got *server) {
	t.Helper()
	describe := func(s *server) []string {
		ll, err := s.Client.Leases(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, l := range ll.Leases {
			ttl, err := s.Client.TimeToLive(ctx, l.ID, clientv3.WithAttachedKeys())
			if err != nil {
				t.Fatal(err)
			}
			var keys []string
			for _, k := range ttl.Keys {
				keys = append(keys, string(k))
			}
			// etcd lists a lease's keys in no particular order.
			slices.Sort(keys)
			out = append(out, fmt.Sprintf("%x ttl=%d keys=%v", int64(l.ID), ttl.GrantedTTL, keys))
		}
		slices.Sort(out)
		return out
	}
	if a, b := describe(want), describe(got); !cmp.Equal(a, b) || len(a) == 0 {
		t.Errorf("leases: source %v, copy %v", a, b)
	}
}

func kiteCopy(t *testing.T, ctx context.Context, args ...string) string {
	t.Helper()
	out, err := kiteCmd(ctx, append([]string{"copy", "--progress-interval", "100ms"}, args...)...)
	if err != nil {
		t.Fatalf("kite copy %v: %v\n%s", args, err, out)
	}
	if !strings.Contains(out, "verified: ") || !strings.Contains(out, "identical in source and target") {
		t.Fatalf("kite copy %v: no verification in the output:\n%s", args, out)
	}
	return out
}

// TestCopyBetweenStorages moves a kite with history from SQLite to
// Postgres and from there to SQLite again; kite on each copy answers
// every read at every revision the source can answer exactly as the
// source does.
func TestCopyBetweenStorages(t *testing.T) {
	if againstEtcd {
		t.Skip("kite copy: kite's own storages")
	}
	ctx := testCtx(t, 3*time.Minute)
	srcDir := t.TempDir()
	src := startKiteIn(t, srcDir)
	compacted := copyHistory(t, ctx, src.server, 30)

	// SQLite -> Postgres, the source still running (its reads come from
	// one snapshot).
	pg := pgtest.NewDatabase(t)
	out := kiteCopy(t, ctx, "--from-data-dir", srcDir, "--to", pg)
	if !strings.Contains(out, "kite copy: ") || !strings.Contains(out, "rows/s") {
		t.Errorf("no progress line in the output:\n%s", out)
	}
	onPG := startKiteIn(t, t.TempDir(), "--datastore-endpoint", pg)
	sameStorage(t, ctx, src.server, onPG.server, compacted)

	// Refused a second time: the target is not empty.
	if out, err := kiteCmd(ctx, "copy", "--from-data-dir", srcDir, "--to", pg); err == nil || !strings.Contains(out, "not empty") || !strings.Contains(out, "--force") {
		t.Errorf("copy over a non-empty Postgres target: %v\n%s", err, out)
	}

	// Postgres -> SQLite, from the copy, with a kite serving it.
	dstDir := filepath.Join(t.TempDir(), "back")
	kiteCopy(t, ctx, "--from", pg, "--to-data-dir", dstDir)
	back := startKiteIn(t, dstDir)
	sameStorage(t, ctx, src.server, back.server, compacted)

	// The copy is a working kite: the next write takes the next revision
	// on both.
	a, errA := src.Client.Put(ctx, "next", "1")
	b, errB := back.Client.Put(ctx, "next", "1")
	if errA != nil || errB != nil || a.Header.Revision != b.Header.Revision {
		t.Errorf("next put: source %v %v, copy %v %v", a, errA, b, errB)
	}

	// A data dir a kite is serving is refused, even with --force.
	if out, err := kiteCmd(ctx, "copy", "--from", pg, "--to-data-dir", dstDir, "--force"); err == nil || !strings.Contains(out, "in use") {
		t.Errorf("copy into a served data dir: %v\n%s", err, out)
	}
	// Stopped, it is refused as non-empty, then replaced with --force.
	back.Kill()
	if out, err := kiteCmd(ctx, "copy", "--from", pg, "--to-data-dir", dstDir); err == nil || !strings.Contains(out, "not empty") {
		t.Errorf("copy over a non-empty data dir: %v\n%s", err, out)
	}
	kiteCopy(t, ctx, "--from", pg, "--to-data-dir", dstDir, "--force")
	back.Restart()
	sameStorage(t, ctx, onPG.server, back.server, compacted)
}

// TestCopyFromEtcd copies a running etcd into kite: every key at the
// copied revision R keeps its create and mod revisions, version, value
// and lease; kite starts at R, compacted at R, and the next write is R+1.
func TestCopyFromEtcd(t *testing.T) {
	if againstEtcd {
		t.Skip("kite copy into kite's storage")
	}
	ctx := testCtx(t, 3*time.Minute)
	es := startEtcd(t)
	copyHistory(t, ctx, es.server, 40)
	// A second lease without keys, and one more txn writing several keys
	// in one revision.
	if _, err := es.Client.Grant(ctx, 300); err != nil {
		t.Fatal(err)
	}
	if _, err := es.Client.Txn(ctx).Then(
		clientv3.OpPut("z/c", "3"), clientv3.OpPut("z/a", "1"), clientv3.OpPut("z/b", "2"),
	).Commit(); err != nil {
		t.Fatal(err)
	}
	want, err := rangeAt(ctx, es.server, 0)
	if err != nil {
		t.Fatal(err)
	}
	r := want.Header.Revision

	dir := filepath.Join(t.TempDir(), "kite")
	// A small page size: the list is read in many pages, all at R.
	out := kiteCopy(t, ctx, "--from", es.Endpoint, "--to-data-dir", dir, "--page-size", "7")
	if !strings.Contains(out, fmt.Sprintf("%d keys at revision %d", len(want.Kvs), r)) {
		t.Errorf("copy output does not report %d keys at revision %d:\n%s", len(want.Kvs), r, out)
	}
	k := startKiteIn(t, dir)
	got, err := rangeAt(ctx, k.server, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got.Header.Revision != r {
		t.Errorf("kite's header revision %d, want R = %d", got.Header.Revision, r)
	}
	want.Header, got.Header = nil, nil
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("keys at R differ (-etcd +kite):\n%s", diff)
	}
	if _, err := rangeAt(ctx, k.server, r); err != nil {
		t.Errorf("range at R on kite: %v", err)
	}
	if _, err := rangeAt(ctx, k.server, r-1); !isCompacted(err) {
		t.Errorf("range at R-1 on kite: %v, want ErrCompacted", err)
	}
	sameLeases(t, ctx, es.server, k.server)
	p, err := k.Client.Put(ctx, "new", "1")
	if err != nil || p.Header.Revision != r+1 {
		t.Errorf("put after the copy: %v %v, want revision %d", p, err, r+1)
	}

	// A non-empty target is refused; the copy into it stays usable.
	k.Kill()
	if out, err := kiteCmd(ctx, "copy", "--from", es.Endpoint, "--to-data-dir", dir); err == nil || !strings.Contains(out, "not empty") {
		t.Errorf("copy over a non-empty target: %v\n%s", err, out)
	}
}

// TestCopyKilled kills a copy with every row written and nothing
// committed: the target is left empty (a copy without --force then
// succeeds), never partial, on SQLite and on Postgres.
func TestCopyKilled(t *testing.T) {
	if againstEtcd {
		t.Skip("kite copy into kite's storage")
	}
	ctx := testCtx(t, 3*time.Minute)
	srcDir := t.TempDir()
	src := startKiteIn(t, srcDir)
	compacted := copyHistory(t, ctx, src.server, 300)

	for _, target := range []struct {
		name string
		args func(t *testing.T) (copyArgs, serveFlags []string, dir string)
	}{
		{"sqlite", func(t *testing.T) ([]string, []string, string) {
			dir := filepath.Join(t.TempDir(), "dst")
			return []string{"--to-data-dir", dir}, nil, dir
		}},
		{"postgres", func(t *testing.T) ([]string, []string, string) {
			pg := pgtest.NewDatabase(t)
			return []string{"--to", pg}, []string{"--datastore-endpoint", pg}, t.TempDir()
		}},
	} {
		t.Run(target.name, func(t *testing.T) {
			copyArgs, serveFlags, dir := target.args(t)
			args := append([]string{"copy", "--from-data-dir", srcDir}, copyArgs...)
			log := &syncBuffer{}
			p, err := testenv.Start(testenv.Command{Argv: append([]string{kiteBin}, args...),
				Env: []string{"KITE_TEST_COPY_PAUSE_BEFORE_COMMIT=1m"}, Out: log})
			if err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(time.Minute)
			for !strings.Contains(log.Tail(4096), "pausing") {
				if time.Now().After(deadline) {
					p.Kill()
					t.Fatalf("copy never reached the commit:\n%s", log.Tail(4096))
				}
				time.Sleep(20 * time.Millisecond)
			}
			p.Kill()

			// Nothing was committed: a copy that refuses any non-empty
			// target succeeds, and the result is complete.
			kiteCopy(t, ctx, append([]string{"--from-data-dir", srcDir}, copyArgs...)...)
			k := startKiteIn(t, dir, serveFlags...)
			sameStorage(t, ctx, src.server, k.server, compacted)
		})
	}
}

// TestCopyFromEtcdTLS copies from an etcd that requires client
// certificates, with etcdctl's --cacert --cert --key; without a client
// certificate the copy fails and writes nothing.
func TestCopyFromEtcdTLS(t *testing.T) {
	if againstEtcd {
		t.Skip("kite copy into kite's storage")
	}
	ctx := testCtx(t, 2*time.Minute)
	pki := newTLSPKI(t)
	addr, err := startEtcdTLS(t, tlsSetup{certFile: pki.certFile, keyFile: pki.keyFile, caFile: pki.caFile, clientCertAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"https://" + addr}, DialTimeout: 5 * time.Second,
		TLS: pki.client(t, pki.good, true)})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Put(ctx, "secure", "yes"); err != nil {
		t.Fatal(err)
	}
	certFile := tlstest.Write(t, pki.dir, "good.pem", pki.good.CertPEM)
	keyFile := tlstest.Write(t, pki.dir, "good-key.pem", pki.good.KeyPEM)

	dir := filepath.Join(t.TempDir(), "kite")
	if out, err := kiteCmd(ctx, "copy", "--from", "https://"+addr, "--cacert", pki.caFile, "--to-data-dir", dir, "--command-timeout", "3s"); err == nil {
		t.Fatalf("copy without a client certificate succeeded:\n%s", out)
	}
	kiteCopy(t, ctx, "--from", "https://"+addr, "--cacert", pki.caFile, "--cert", certFile, "--key", keyFile, "--to-data-dir", dir)
	k := startKiteIn(t, dir)
	if resp, err := k.Client.Get(ctx, "secure"); err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "yes" {
		t.Errorf("copied key: %v %v", resp, err)
	}
}
