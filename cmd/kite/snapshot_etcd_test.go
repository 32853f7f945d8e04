package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/snapshot"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/kite-db/kite/internal/freeport"
	"github.com/kite-db/kite/pkg/drivers/sqlite"
	"github.com/kite-db/kite/pkg/mvcc"
)

// etcdHistory is what a real etcd answered about the key space it was
// snapshotted with.
type etcdHistory struct {
	file               string // etcdctl's snapshot save output, trailer included
	current, compacted int64
	older              int64 // a revision between compacted and current
	ranges             map[int64]*clientv3.GetResponse
	hashes             map[int64]uint32 // HashKV at each revision of ranges
	events             []*clientv3.Event
	leases             map[int64]*clientv3.LeaseTimeToLiveResponse
}

// freeLoopbackPort returns a loopback port that was free a moment ago
// (internal/freeport: below the ephemeral range).
func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	port, err := freeport.One()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// embeddedEtcd is etcd 3.7 running in the test process on loopback ports.
type embeddedEtcd struct {
	cfg *embed.Config
	e   *embed.Etcd
	cli *clientv3.Client
	ep  string
}

func startEmbeddedEtcd(t *testing.T) *embeddedEtcd {
	t.Helper()
	ee := &embeddedEtcd{}
	dir := filepath.Join(t.TempDir(), "etcd")
	var err error
	for range 3 { // a port taken between asking and binding: try others
		ee.cfg = embed.NewConfig()
		ee.cfg.Name = "snap"
		ee.cfg.Dir = dir
		cu := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", freeLoopbackPort(t))}
		pu := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", freeLoopbackPort(t))}
		ee.cfg.ListenClientUrls, ee.cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
		ee.cfg.ListenPeerUrls, ee.cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
		ee.cfg.InitialCluster = ee.cfg.InitialClusterFromName(ee.cfg.Name)
		ee.cfg.LogLevel = "error"
		ee.cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
		ee.ep = cu.String()
		if err = ee.start(); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("start embedded etcd: %v", err)
	}
	t.Cleanup(ee.stop)
	return ee
}

func (ee *embeddedEtcd) start() error {
	e, err := embed.StartEtcd(ee.cfg)
	if err != nil {
		return err
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		e.Close()
		return errors.New("embedded etcd not ready in 30s")
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ee.ep}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		e.Close()
		return err
	}
	ee.e, ee.cli = e, cli
	return nil
}

func (ee *embeddedEtcd) stop() {
	if ee.cli != nil {
		ee.cli.Close()
		ee.cli = nil
	}
	if ee.e != nil {
		ee.e.Close()
		ee.e = nil
	}
}

// etcdSnapshotOfHistory writes a history into a real etcd (versions,
// deletes and re-creations, txns of several changes, keys on leases, a
// lease without keys, a revoked lease, a compaction at a delete, more
// writes after it), saves a snapshot as etcdctl does, and records etcd's
// own answers.
func etcdSnapshotOfHistory(t *testing.T) *etcdHistory {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ee := startEmbeddedEtcd(t)
	cli, ep := ee.cli, ee.ep
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	grant := func(ttl int64) clientv3.LeaseID {
		t.Helper()
		l, err := cli.Grant(ctx, ttl)
		if err != nil {
			t.Fatal(err)
		}
		return l.ID
	}
	for _, v := range []string{"v1", "v2", "v3"} {
		must(cli.Put(ctx, "a", v))
	}
	must(cli.Put(ctx, "b", "1"))
	must(cli.Delete(ctx, "b"))
	must(cli.Put(ctx, "b", "2"))
	must(cli.Put(ctx, "c", "x"))
	kept, idle, revoked := grant(600), grant(300), grant(120)
	_ = idle // granted, never used: it must survive as a lease alone
	must(cli.Put(ctx, "l/1", "one", clientv3.WithLease(kept)))
	must(cli.Put(ctx, "l/2", "two", clientv3.WithLease(kept)))
	must(cli.Put(ctx, "l/3", "three", clientv3.WithLease(revoked)))
	must(cli.Txn(ctx).Then(clientv3.OpPut("t/1", "1"), clientv3.OpPut("t/2", "2"), clientv3.OpDelete("c")).Commit())
	must(cli.Revoke(ctx, revoked))
	must(cli.Put(ctx, "d", "1"))
	del, err := cli.Delete(ctx, "d")
	if err != nil {
		t.Fatal(err)
	}
	h := &etcdHistory{compacted: del.Header.Revision}
	// Compacted at a tombstone: etcd keeps that row, and leaves it out of
	// HashKV.
	must(cli.Compact(ctx, h.compacted, clientv3.WithCompactPhysical()))
	must(cli.Put(ctx, "a", "v4"))
	must(cli.Put(ctx, "e", "leased", clientv3.WithLease(kept)))
	older, err := cli.Delete(ctx, "t/1")
	if err != nil {
		t.Fatal(err)
	}
	h.older = older.Header.Revision
	must(cli.Txn(ctx).Then(clientv3.OpPut("f", "1"), clientv3.OpPut("g", "2"), clientv3.OpPut("b", "3", clientv3.WithLease(kept))).Commit())
	must(cli.Put(ctx, "a", "v5"))

	h.file = filepath.Join(t.TempDir(), "etcd.snapshot")
	if _, err := snapshot.SaveWithVersion(ctx, zap.NewNop(), clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second}, h.file); err != nil {
		t.Fatalf("snapshot save: %v", err)
	}

	h.ranges, h.hashes = map[int64]*clientv3.GetResponse{}, map[int64]uint32{}
	all, err := cli.Get(ctx, "\x00", clientv3.WithFromKey())
	if err != nil {
		t.Fatal(err)
	}
	h.current = all.Header.Revision
	hk, err := cli.HashKV(ctx, ep, h.current)
	if err != nil {
		t.Fatal(err)
	}
	// HashKV at a compaction's revision answers from a value etcd
	// computed while compacting, over the history before it, which no
	// snapshot holds. Restarted on its database (as a restore of the
	// snapshot would start), etcd computes every hash from what is stored.
	ee.stop()
	if err := ee.start(); err != nil {
		t.Fatalf("restart embedded etcd: %v", err)
	}
	cli = ee.cli
	for _, rev := range []int64{h.current, h.older, h.compacted} {
		if h.ranges[rev], err = cli.Get(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithRev(rev)); err != nil {
			t.Fatal(err)
		}
		hk, err := cli.HashKV(ctx, ep, rev)
		if err != nil {
			t.Fatal(err)
		}
		h.hashes[rev] = hk.Hash
	}
	if h.hashes[h.current] != hk.Hash {
		t.Fatalf("etcd's HashKV at %d changed across its restart: %x, then %x", h.current, hk.Hash, h.hashes[h.current])
	}
	if _, err := cli.Get(ctx, "a", clientv3.WithRev(h.compacted-1)); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Fatalf("etcd read below its compaction: %v", err)
	}
	// Every change after the compaction, as a watcher from there gets them.
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	for resp := range cli.Watch(wctx, "\x00", clientv3.WithFromKey(), clientv3.WithRev(h.compacted+1)) {
		if err := resp.Err(); err != nil {
			t.Fatal(err)
		}
		h.events = append(h.events, resp.Events...)
		if n := len(h.events); n > 0 && h.events[n-1].Kv.ModRevision == h.current {
			break
		}
	}
	h.leases = map[int64]*clientv3.LeaseTimeToLiveResponse{}
	list, err := cli.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range list.Leases {
		if h.leases[int64(l.ID)], err = cli.TimeToLive(ctx, l.ID, clientv3.WithAttachedKeys()); err != nil {
			t.Fatal(err)
		}
	}
	if len(h.leases) != 2 || h.leases[int64(idle)] == nil || h.leases[int64(kept)] == nil {
		t.Fatalf("etcd leases %v; want %x and %x", h.leases, kept, idle)
	}
	return h
}

func quietLog() *slog.Logger { return slog.New(slog.DiscardHandler) }

// sameKVs reports how two key lists differ, field by field ("" if not).
func sameKVs(got, want []*mvccpb.KeyValue) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d keys, want %d: %v, want %v", len(got), len(want), got, want)
	}
	for i := range got {
		if !proto.Equal(got[i], want[i]) {
			return fmt.Sprintf("key %d: %v, want %v", i, got[i], want[i])
		}
	}
	return ""
}

// TestRestoreEtcdSnapshot restores a snapshot of a real etcd into a data
// dir and reads it through kite's store: every key at the current, an
// older and the compacted revision as etcd answered, ErrCompacted below,
// the changes after the compaction as etcd's watcher got them, the leases
// with their TTLs and keys, and the next write one revision on.
func TestRestoreEtcdSnapshot(t *testing.T) {
	h := etcdSnapshotOfHistory(t)
	ctx := context.Background()
	dataDir := filepath.Join(t.TempDir(), "restored")
	rev, err := restoreSnapshot(ctx, quietLog(), h.file, dataDir)
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	if rev != h.current {
		t.Errorf("restored at revision %d, etcd was at %d", rev, h.current)
	}
	b, err := sqlite.Open(ctx, filepath.Join(dataDir, "kite.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s, err := mvcc.Open(ctx, b, mvcc.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	if cur, comp := s.Revisions(); cur != h.current || comp != h.compacted {
		t.Errorf("kite at revision %d compacted %d; etcd at %d compacted %d", cur, comp, h.current, h.compacted)
	}
	for rev, want := range h.ranges {
		got, err := s.Range(ctx, &pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, Revision: rev})
		if err != nil {
			t.Fatalf("range at %d: %v", rev, err)
		}
		if d := sameKVs(got.Kvs, want.Kvs); d != "" || got.Count != want.Count || got.More != want.More || got.Header.Revision != want.Header.Revision {
			t.Errorf("range at %d: count %d more %v header %d; etcd count %d more %v header %d; %s",
				rev, got.Count, got.More, got.Header.Revision, want.Count, want.More, want.Header.Revision, d)
		}
	}
	if _, err := s.Range(ctx, &pb.RangeRequest{Key: []byte("a"), Revision: h.compacted - 1}); !errors.Is(err, mvcc.ErrCompacted) {
		t.Errorf("range below the compacted revision: %v, want ErrCompacted", err)
	}

	tx, err := b.BeginRead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	changes, err := tx.Changes(ctx, h.compacted+1, h.current, 0, false)
	tx.Rollback()
	if err != nil {
		t.Fatal(err)
	}
	if len(changes) != len(h.events) {
		t.Fatalf("%d changes after the compaction, etcd's watcher got %d", len(changes), len(h.events))
	}
	for i, c := range changes {
		e := h.events[i]
		if c.Deleted != (e.Type == mvccpb.Event_DELETE) || !proto.Equal(c.KV, e.Kv) {
			t.Errorf("change %d: deleted=%v %v; etcd %v %v", i, c.Deleted, c.KV, e.Type, e.Kv)
		}
	}

	leases, err := s.LeaseLeases(ctx, &pb.LeaseLeasesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(leases.Leases) != len(h.leases) {
		t.Errorf("kite has %d leases, etcd %d", len(leases.Leases), len(h.leases))
	}
	for id, want := range h.leases {
		got, err := s.LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: id, Keys: true})
		if err != nil {
			t.Errorf("lease %x: %v", id, err)
			continue
		}
		slices.SortFunc(got.Keys, bytes.Compare)
		slices.SortFunc(want.Keys, bytes.Compare)
		if got.GrantedTTL != want.GrantedTTL || !slices.EqualFunc(got.Keys, want.Keys, bytes.Equal) {
			t.Errorf("lease %x: TTL %d keys %q; etcd TTL %d keys %q", id, got.GrantedTTL, got.Keys, want.GrantedTTL, want.Keys)
		}
	}

	put, err := s.Put(ctx, &pb.PutRequest{Key: []byte("after"), Value: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	if put.Header.Revision != h.current+1 {
		t.Errorf("first write after the restore at revision %d, want %d", put.Header.Revision, h.current+1)
	}

	// Restoring over a restored dir is refused before any conversion.
	if _, err := restoreSnapshot(ctx, quietLog(), h.file, dataDir); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("restore over an existing database: %v", err)
	}
}

// TestEtcdSnapshotStatus: kite snapshot status of an etcd snapshot
// reports etcd's HashKV, revision and key count; the hash is computed as
// etcd computes it at older revisions too.
func TestEtcdSnapshotStatus(t *testing.T) {
	h := etcdSnapshotOfHistory(t)
	st, err := readSnapshotStatus(context.Background(), h.file)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(h.file)
	if err != nil {
		t.Fatal(err)
	}
	if st.Hash != h.hashes[h.current] || st.Revision != h.current || st.TotalKeys != h.ranges[h.current].Count ||
		st.TotalSize != fi.Size()-sha256.Size || st.Version == "" {
		t.Errorf("status %+v; etcd: hash %x at revision %d, %d keys, file of %d bytes",
			st, h.hashes[h.current], h.current, h.ranges[h.current].Count, fi.Size())
	}

	data, err := os.ReadFile(h.file)
	if err != nil {
		t.Fatal(err)
	}
	if data, err = stripChecksum(data); err != nil {
		t.Fatal(err)
	}
	snap, err := openEtcdSnapshot(data)
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	for rev, want := range h.hashes {
		got, keys, err := snap.hashKV(h.compacted, rev)
		if err != nil {
			t.Fatal(err)
		}
		if got != want || keys != h.ranges[rev].Count {
			t.Errorf("hash at revision %d: %x over %d keys; etcd %x over %d keys", rev, got, keys, want, h.ranges[rev].Count)
		}
	}
}

// TestRefusedSnapshots: a snapshot whose sha256 trailer does not match,
// a file of neither format (with a valid trailer too) and a bbolt file that
// is not etcd's are refused with an error naming the problem, by restore,
// status and copy alike, and restore leaves no database behind.
func TestRefusedSnapshots(t *testing.T) {
	h := etcdSnapshotOfHistory(t)
	ctx := context.Background()
	dir := t.TempDir()
	data, err := os.ReadFile(h.file)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	corrupt := slices.Clone(data)
	corrupt[len(corrupt)-1] ^= 0xff
	garbage := bytes.Repeat([]byte("not a database "), 70)[:1024]
	sum := sha256.Sum256(garbage)

	otherBolt := filepath.Join(dir, "other.bolt")
	db, err := bolt.Open(otherBolt, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("things"))
		if err != nil {
			return err
		}
		return b.Put([]byte("k"), []byte("v"))
	})
	if err := errors.Join(err, db.Close()); err != nil {
		t.Fatal(err)
	}

	for _, tt := range []struct {
		name, file, want string
	}{
		{"corrupt trailer", write("corrupt.snapshot", corrupt), "sha256 checksum mismatch"},
		{"text", write("text.snapshot", []byte("hello, I am no snapshot\n")), errUnknownSnapshot.Error()},
		{"garbage with a good trailer", write("garbage.snapshot", append(garbage, sum[:]...)), errUnknownSnapshot.Error()},
		{"bbolt but not etcd", otherBolt, `no "key" bucket`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dataDir := filepath.Join(dir, tt.name)
			if _, err := restoreSnapshot(ctx, quietLog(), tt.file, dataDir); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("restore: %v, want an error with %q", err, tt.want)
			}
			if _, err := os.Stat(filepath.Join(dataDir, "kite.db")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a refused restore left a database: %v", err)
			}
			if _, err := readSnapshotStatus(ctx, tt.file); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("status: %v, want an error with %q", err, tt.want)
			}
			cfg := testCopyConfig(t, "--from-snapshot", tt.file, "--to", "sqlite://"+filepath.Join(dir, tt.name+".db"))
			if _, err := copyCluster(ctx, cfg, io.Discard); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("copy: %v, want an error with %q", err, tt.want)
			}
		})
	}
}

// TestCopyFromEtcdSnapshot: kite copy --from-snapshot writes the same
// database as a restore of that snapshot, verified; an etcd snapshot given
// as a sqlite:// source is refused with a pointer to --from-snapshot.
func TestCopyFromEtcdSnapshot(t *testing.T) {
	h := etcdSnapshotOfHistory(t)
	ctx := context.Background()
	dir := t.TempDir()
	if _, err := restoreSnapshot(ctx, quietLog(), h.file, filepath.Join(dir, "restored")); err != nil {
		t.Fatal(err)
	}
	want := dump(t, "sqlite://"+filepath.Join(dir, "restored", "kite.db"))

	var log bytes.Buffer
	res, err := copyCluster(ctx, testCopyConfig(t, "--from-snapshot", h.file, "--to-data-dir", filepath.Join(dir, "copied")), &log)
	if err != nil {
		t.Fatalf("copy: %v\n%s", err, log.String())
	}
	if got := dump(t, "sqlite://"+filepath.Join(dir, "copied", "kite.db")); got != want {
		t.Fatalf("copy differs from restore:\n--- restore\n%s\n--- copy\n%s", want, got)
	}
	if res.current != h.current || res.compacted != h.compacted || res.keys != h.ranges[h.current].Count ||
		res.leases != len(h.leases) || res.from != h.file {
		t.Errorf("copy result %+v; etcd revision %d compacted %d, %d keys, %d leases", res, h.current, h.compacted,
			h.ranges[h.current].Count, len(h.leases))
	}

	data, err := os.ReadFile(h.file)
	if err != nil {
		t.Fatal(err)
	}
	raw := filepath.Join(dir, "raw.db")
	if err := os.WriteFile(raw, data[:len(data)-sha256.Size], 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = copyCluster(ctx, testCopyConfig(t, "--from", "sqlite://"+raw, "--to", "sqlite://"+filepath.Join(dir, "x.db")), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--from-snapshot") {
		t.Errorf("copy --from sqlite://<etcd db>: %v, want a pointer to --from-snapshot", err)
	}
}
