package test

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/kite-db/kite/pkg/drivers/mysql/mysqltest"
	"github.com/kite-db/kite/pkg/drivers/postgres/pgtest"
)

// What kine v0.17.5 does differently from etcd, and what the test expects
// of a copy because of it:
//
//   - Revisions: every row kine inserts takes the next id, which is the
//     revision. Besides the writes of its clients that is the row of its
//     own "compact_rev_key" (revision 1), the key /registry/health it
//     creates at start (revision 2), and a new compact_rev_key row on every
//     compaction: a Compact moves kine's revision, etcd's does not (and
//     kine never compacts the last 1000 revisions, whatever revision it is
//     asked for). The copy keeps kine's header revision R whatever made it.
//   - Paging: a Range of the whole key space ("\x00" to "\x00") ignores
//     its limit (every key but the last comes back, with more set), and
//     any other range ending at "\x00" answers nothing, so a copy cannot
//     page through kine as through etcd. The Postgres and MySQL copies
//     below ask for pages of 97 keys, the SQLite ones for the default 500.
//   - Versions: kine does not count a key's modifications and reports
//     version 0 for every key, which etcd never does for a key that exists
//     (Compare(Version(k), "=", 0) is how clients ask "k is absent"). The
//     copy must give versions etcd could report for those revisions: 1
//     for a key never modified since its creation (mod == create), at
//     least 2 for one modified since.
//   - compact_rev_key: kine keeps its own compaction bookkeeping under
//     that name and stores kube-apiserver's compact_rev_key (whose version
//     the apiserver compares in its compaction txn) as
//     compact_rev_key_apiserver, with the version encoded in the value. A
//     Get of compact_rev_key answers the apiserver's, version decoded; a
//     list of the whole key space answers both under the one name. The
//     copy must hold kube-apiserver's, as a Get on kine answers it, and
//     not kine's bookkeeping.
//   - Leases: LeaseGrant answers ID = TTL and grants nothing; a key's
//     lease field is its TTL in seconds, counted by kine from the key's
//     write. LeaseLeases, LeaseTimeToLive, keep-alives and revokes answer
//     "not supported". The copy must hold, for every lease ID on a copied
//     key, a lease of that ID whose granted TTL is the ID, with exactly
//     the keys that carry it on kine (its countdown starting when a kite
//     serves the copy, as after an etcd restart).
//   - kine implements the writes kube-apiserver makes: Put, and Txns of
//     exactly its create, update, delete and compaction shapes; no
//     DeleteRange. The history below is written in those shapes.
//
// kine on MySQL (its mysql:// endpoint, MariaDB 10.11 here) answers as on
// SQLite but for its key column, CHARACTER SET ascii, whose collation
// (ascii_general_ci) ignores case:
//
//   - Key order: kine lists ORDER BY that column, not in byte order.
//     Capitals sort as small letters, so '_' comes after every letter:
//     ciZ < ci_reader < cia in bytes, cia < ciZ < ci_reader on kine. The
//     copy's sum is taken in the order the keys come and compared with the
//     target's, read in byte order, so until kite copy sorted kine's
//     answer (one response, see Paging) a copy of such names failed its
//     verification. The history holds RBAC names like these, and kineKeys
//     checks that kine lists them out of byte order, so the sort stays
//     tested.
//   - Case: two keys that differ only in case are one key: a create of /a
//     after /A answers "exists" and a Get of /a answers /A. The copy holds
//     what kine lists, so such a pair cannot be in kine to copy; the
//     history writes none.
//   - Revisions: as on SQLite for this history (the same R, and the
//     compactions delete the same rows). A create that loses its compare
//     takes no AUTO_INCREMENT id, and no gap-fill rows appeared: kine
//     writes them (named gap-N, deleted) only for an id that was taken
//     and never committed, and a copy of the keys at R holds no deleted
//     row anyway.
//   - Paging, versions, leases and compact_rev_key: as on SQLite, that
//     code being above the SQL. (kine's MySQL driver also turns a start
//     key's trailing "\x00" into "#"; the copy does not page kine, so it
//     sends none.)

// kineWrite issues writes the way kube-apiserver does, which is all kine
// understands.
type kineWrite struct{ cli *clientv3.Client }

// create writes key if it does not exist and returns its revision.
func (w kineWrite) create(ctx context.Context, key string, val []byte, lease clientv3.LeaseID) (int64, error) {
	resp, err := w.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(val), clientv3.WithLease(lease))).Commit()
	if err != nil {
		return 0, fmt.Errorf("create %s: %w", key, err)
	}
	if !resp.Succeeded {
		return 0, fmt.Errorf("create %s: it exists", key)
	}
	return resp.Header.Revision, nil
}

// update replaces key if its mod revision is still rev and returns the
// new one.
func (w kineWrite) update(ctx context.Context, key string, val []byte, rev int64, lease clientv3.LeaseID) (int64, error) {
	resp, err := w.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
		Then(clientv3.OpPut(key, string(val), clientv3.WithLease(lease))).Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return 0, fmt.Errorf("update %s: %w", key, err)
	}
	if !resp.Succeeded {
		return 0, fmt.Errorf("update %s: modified since revision %d", key, rev)
	}
	return resp.Header.Revision, nil
}

// delete removes key if its mod revision is still rev.
func (w kineWrite) delete(ctx context.Context, key string, rev int64) error {
	resp, err := w.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
		Then(clientv3.OpDelete(key)).Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("delete %s: modified since revision %d", key, rev)
	}
	return nil
}

// compact is one round of kube-apiserver's compactor: record the revision
// in compact_rev_key if its version is still version, then compact there.
func (w kineWrite) compact(ctx context.Context, version int64) error {
	cur, err := w.cli.Get(ctx, "/registry/health")
	if err != nil {
		return fmt.Errorf("compaction: current revision: %w", err)
	}
	rev := cur.Header.Revision
	resp, err := w.cli.Txn(ctx).If(clientv3.Compare(clientv3.Version("compact_rev_key"), "=", version)).
		Then(clientv3.OpPut("compact_rev_key", strconv.FormatInt(rev, 10))).Else(clientv3.OpGet("compact_rev_key")).Commit()
	if err != nil {
		return fmt.Errorf("compaction txn: %w", err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("compaction txn at version %d did not succeed: %v", version, resp)
	}
	if _, err := w.cli.Compact(ctx, rev); err != nil {
		return fmt.Errorf("compact at %d: %w", rev, err)
	}
	return nil
}

// kineObject is one key the history wrote, as the writer last left it.
type kineObject struct {
	key   string
	rev   int64 // its mod revision; 0 once deleted
	lease clientv3.LeaseID
}

// kineValue is a value shaped like kube-apiserver's protobuf encoding:
// binary, a few hundred bytes to a few KiB.
func kineValue(r *rand.Rand, key string, gen int) []byte {
	b := append([]byte("k8s\x00\n\x0fv1\x12"), fmt.Sprintf("%s generation %d ", key, gen)...)
	for range 64 + r.IntN(1500) {
		b = append(b, byte(r.UintN(256)))
	}
	return b
}

// inParallel runs f on every element of objs with 8 workers, kine being
// written by several apiserver goroutines at once.
func inParallel(ctx context.Context, objs []*kineObject, f func(context.Context, *kineObject) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	work := make(chan *kineObject)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for o := range work {
				if err := f(ctx, o); err != nil {
					cancel(err)
				}
			}
		})
	}
feed:
	for _, o := range objs {
		select {
		case work <- o:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	return context.Cause(ctx)
}

// kineHistory writes what a kube-apiserver leaves in kine: 20 namespaces
// of configmaps, secrets, pods and events (events on a 3660 s lease, the
// apiserver's master leases on a 600 s one), updates (pods several
// times), a compaction, deletes and re-creates, a second compaction,
// updates after it, and a few plain Puts. It returns the number of keys
// it left (kine's own /registry/health not counted) and the lease IDs
// its keys carry.
func kineHistory(t *testing.T, ctx context.Context, k *kineProcess) (live int, leases []clientv3.LeaseID) {
	t.Helper()
	w := kineWrite{k.Client}
	eventsLease, err := k.Client.Grant(ctx, 3660)
	if err != nil {
		t.Fatal(err)
	}
	mastersLease, err := k.Client.Grant(ctx, 600)
	if err != nil {
		t.Fatal(err)
	}
	// What tells kine apart: a lease's ID is its TTL.
	if eventsLease.ID != 3660 || mastersLease.ID != 600 {
		t.Fatalf("kine granted leases %d and %d, want IDs 3660 and 600 (ID = TTL)", eventsLease.ID, mastersLease.ID)
	}
	var objs []*kineObject
	add := func(key string, lease clientv3.LeaseID) { objs = append(objs, &kineObject{key: key, lease: lease}) }
	for ns := range 20 {
		n := fmt.Sprintf("ns-%02d", ns)
		add("/registry/namespaces/"+n, 0)
		for i := range 40 {
			add(fmt.Sprintf("/registry/configmaps/%s/cm-%02d", n, i), 0)
		}
		for i := range 30 {
			add(fmt.Sprintf("/registry/secrets/%s/secret-%02d", n, i), 0)
		}
		for i := range 20 {
			add(fmt.Sprintf("/registry/pods/%s/pod-%02d", n, i), 0)
		}
		for i := range 10 {
			add(fmt.Sprintf("/registry/events/%s/pod-%02d.%x", n, i, 0x17a000+ns*10+i), eventsLease.ID)
		}
	}
	for i := range 3 {
		add(fmt.Sprintf("/registry/masterleases/127.0.0.%d", i+1), mastersLease.ID)
	}
	// RBAC names may hold capitals and '_': in byte order these four are
	// Admin-Viewer, ciZ, ci_reader, cia, not in the order of a
	// case-insensitive collation (kine's MySQL table).
	for _, name := range []string{"Admin-Viewer", "ci_reader", "cia", "ciZ"} {
		add("/registry/clusterroles/"+name, 0)
	}
	r := rand.New(rand.NewPCG(1, 2))
	var mu sync.Mutex // r is not safe for concurrent use
	value := func(o *kineObject, gen int) []byte {
		mu.Lock()
		defer mu.Unlock()
		return kineValue(r, o.key, gen)
	}
	pick := func(match func(i int, o *kineObject) bool) []*kineObject {
		var out []*kineObject
		for i, o := range objs {
			if o.rev != 0 && match(i, o) {
				out = append(out, o)
			}
		}
		return out
	}
	update := func(gen int) func(context.Context, *kineObject) error {
		return func(ctx context.Context, o *kineObject) (err error) {
			o.rev, err = w.update(ctx, o.key, value(o, gen), o.rev, o.lease)
			return err
		}
	}

	if err := inParallel(ctx, objs, func(ctx context.Context, o *kineObject) (err error) {
		o.rev, err = w.create(ctx, o.key, value(o, 0), o.lease)
		return err
	}); err != nil {
		t.Fatalf("kine: create %d objects: %v", len(objs), err)
	}
	if err := inParallel(ctx, pick(func(i int, o *kineObject) bool { return i%3 == 0 }), update(1)); err != nil {
		t.Fatalf("kine: updates: %v", err)
	}
	pods := pick(func(_ int, o *kineObject) bool { return strings.HasPrefix(o.key, "/registry/pods/") })
	for gen := 2; gen <= 4; gen++ {
		if err := inParallel(ctx, pods[:len(pods)/4], update(gen)); err != nil {
			t.Fatalf("kine: pod status updates: %v", err)
		}
	}
	if err := w.compact(ctx, 0); err != nil {
		t.Fatalf("kine: %v", err)
	}
	deleted := pick(func(i int, o *kineObject) bool { return strings.HasPrefix(o.key, "/registry/secrets/") && i%7 == 0 })
	if err := inParallel(ctx, deleted, func(ctx context.Context, o *kineObject) error {
		err := w.delete(ctx, o.key, o.rev)
		o.rev = 0
		return err
	}); err != nil {
		t.Fatalf("kine: deletes: %v", err)
	}
	// Re-created: a new create revision, as for an object deleted and
	// made again under the same name.
	for _, o := range deleted[:len(deleted)/2] {
		if o.rev, err = w.create(ctx, o.key, value(o, 5), 0); err != nil {
			t.Fatalf("kine: %v", err)
		}
	}
	if err := w.compact(ctx, 1); err != nil {
		t.Fatalf("kine: %v", err)
	}
	if err := inParallel(ctx, pick(func(i int, o *kineObject) bool { return i%11 == 0 }), update(6)); err != nil {
		t.Fatalf("kine: updates after the compaction: %v", err)
	}
	// Plain Puts (kine: create, or update of the latest revision), as
	// etcdctl put writes.
	for i, key := range []string{"/registry/ranges/serviceips", "/registry/ranges/servicenodeports", "/registry/ranges/serviceips"} {
		resp, err := k.Client.Put(ctx, key, fmt.Sprintf("range %d", i))
		if err != nil {
			t.Fatalf("kine: put %s: %v", key, err)
		}
		if i < 2 {
			objs = append(objs, &kineObject{key: key, rev: resp.Header.Revision})
		}
	}
	for _, o := range objs {
		if o.rev != 0 {
			live++
		}
	}
	return live, []clientv3.LeaseID{mastersLease.ID, eventsLease.ID}
}

// kineKeys is what kine answers for every key a copy should hold: the
// keys under /registry/ (kube-apiserver's prefix, which kine lists and
// pages correctly) and compact_rev_key as a Get answers it, in key order,
// with kine's header revision. bytewise says whether kine lists in byte
// order, as etcd does; where it does not (MySQL), the history holds keys
// it lists out of that order, which is checked, so that the copy's
// ordering stays tested.
func kineKeys(t *testing.T, ctx context.Context, k *kineProcess, bytewise bool) (*pb.RangeResponse, int64) {
	t.Helper()
	reg, err := k.KV.Range(ctx, &pb.RangeRequest{Key: []byte("/registry/"), RangeEnd: []byte("/registry0")})
	if err != nil {
		t.Fatalf("kine: list /registry/: %v", err)
	}
	crk, err := k.KV.Range(ctx, &pb.RangeRequest{Key: []byte("compact_rev_key")})
	if err != nil || len(crk.Kvs) != 1 {
		t.Fatalf("kine: get compact_rev_key: %v %v", crk, err)
	}
	if crk.Header.Revision != reg.Header.Revision {
		t.Fatalf("kine's revision moved between two reads (%d, %d): nothing should write to it now", reg.Header.Revision, crk.Header.Revision)
	}
	want := &pb.RangeResponse{Kvs: append(reg.Kvs, crk.Kvs...), Count: reg.Count + 1}
	byKey := func(a, b *mvccpb.KeyValue) int { return bytes.Compare(a.Key, b.Key) }
	if slices.IsSortedFunc(want.Kvs, byKey) != bytewise {
		t.Fatalf("kine's keys in byte order: %v, want %v", !bytewise, bytewise)
	}
	slices.SortFunc(want.Kvs, byKey)
	return want, reg.Header.Revision
}

// kineLeases maps each lease ID on kine's keys to those keys, sorted.
func kineLeases(kvs []*mvccpb.KeyValue) map[int64][]string {
	out := make(map[int64][]string)
	for _, kv := range kvs {
		if kv.Lease != 0 {
			out[kv.Lease] = append(out[kv.Lease], string(kv.Key))
		}
	}
	for _, keys := range out {
		slices.Sort(keys)
	}
	return out
}

// TestCopyFromKine copies a running kine v0.17.5 (k3s's etcd shim)
// holding a kube-apiserver-like history into kite, then compares kite on
// each copy with kine key by key: value, create and mod revision, lease,
// version (as kine allows, see above), the header revision R of a Range,
// the leases; reads below R are compacted on the copy, and its next write
// is R+1. kine runs on its default SQLite and on MySQL (MariaDB), where
// k3s users keep their data. A history and each copy take seconds, so
// kine on MySQL is copied into SQLite and MySQL only: Postgres as a target
// tests nothing the SQLite source does not.
func TestCopyFromKine(t *testing.T) {
	if againstEtcd {
		t.Skip("kite copy into kite's storage")
	}
	for _, src := range []struct {
		name     string
		endpoint func(t *testing.T) string // kine's KINE_ENDPOINT
		bytewise bool                      // kine lists keys in byte order
		targets  []string
	}{
		{"kine-sqlite", func(*testing.T) string { return "" }, true, []string{"sqlite", "postgres", "mysql"}},
		{"kine-mysql", func(t *testing.T) string { return mysqltest.NewDatabase(t) }, false, []string{"sqlite", "mysql"}},
	} {
		t.Run(src.name, func(t *testing.T) { copyFromKine(t, src.endpoint(t), src.bytewise, src.targets) })
	}
}

// kiteTarget returns, for a target named sqlite, postgres or mysql, kite
// copy's target flags (args), kite's storage flags for serving the copy
// (serve) and its data dir.
func kiteTarget(t *testing.T, name string) (args, serve []string, dir string) {
	t.Helper()
	switch name {
	case "sqlite":
		dir := filepath.Join(t.TempDir(), "kite")
		return []string{"--to", "sqlite://" + filepath.Join(dir, "kite.db")}, nil, dir
	case "postgres", "mysql":
		dsn := ""
		if name == "postgres" {
			dsn = pgtest.NewDatabase(t)
		} else {
			dsn = mysqltest.NewDatabase(t)
		}
		// --page-size: kite copy sends kine no limit (kine does not page
		// its whole key space), so a small one must change nothing.
		return []string{"--to", dsn, "--page-size", "97"}, []string{"--datastore-endpoint", dsn}, t.TempDir()
	}
	t.Fatalf("no copy target %q", name)
	return nil, nil, ""
}

// copyFromKine writes the history into a kine on endpoint ("" its default
// SQLite), copies it into each of targets and compares. bytewise is as
// for kineKeys.
func copyFromKine(t *testing.T, endpoint string, bytewise bool, targets []string) {
	k := startKine(t, endpoint)
	ctx := testCtx(t, 8*time.Minute)
	start := time.Now()
	live, leases := kineHistory(t, ctx, k)
	t.Logf("kine history written in %v", time.Since(start).Round(time.Millisecond))

	want, r := kineKeys(t, ctx, k, bytewise)
	t.Logf("kine at revision %d holds %d keys", r, len(want.Kvs))
	// The comparison below is with kine's answers, so first make sure
	// kine holds what was written (and kine's own /registry/health):
	// otherwise two empty key spaces would compare equal.
	if got := len(want.Kvs); got != live+2 || live < 1900 {
		t.Fatalf("kine holds %d keys, want the %d written + /registry/health + compact_rev_key", got, live)
	}
	wantLeases := kineLeases(want.Kvs)
	if len(wantLeases) != len(leases) || len(wantLeases[int64(leases[0])]) != 3 || len(wantLeases[int64(leases[1])]) != 200 {
		t.Fatalf("kine's leased keys: %d leases (%d and %d keys), want 3 on lease %d, 200 on lease %d",
			len(wantLeases), len(wantLeases[int64(leases[0])]), len(wantLeases[int64(leases[1])]), leases[0], leases[1])
	}
	crk := want.Kvs[len(want.Kvs)-1]
	if string(crk.Key) != "compact_rev_key" || crk.Version != 2 {
		t.Fatalf("kine's compact_rev_key after two apiserver compactions: %v, want version 2", crk)
	}

	for _, name := range targets {
		t.Run(name, func(t *testing.T) {
			args, serve, dir := kiteTarget(t, name)
			out := kiteCopy(t, ctx, append([]string{"--from", k.Endpoint}, args...)...)
			if !strings.Contains(out, fmt.Sprintf("%d keys at revision %d", len(want.Kvs), r)) {
				t.Errorf("copy output does not report %d keys at revision %d:\n%s", len(want.Kvs), r, out)
			}
			kt := startKiteIn(t, dir, serve...)
			got, err := rangeAt(ctx, kt.server, 0)
			if err != nil {
				t.Fatal(err)
			}
			if got.Header.Revision != r {
				t.Errorf("kite's header revision %d, want kine's R = %d", got.Header.Revision, r)
			}
			sameAsKine(t, want, got)
			if _, err := rangeAt(ctx, kt.server, r); err != nil {
				t.Errorf("range at R on the copy: %v", err)
			}
			if _, err := rangeAt(ctx, kt.server, r-1); !isCompacted(err) {
				t.Errorf("range at R-1 on the copy: %v, want ErrCompacted", err)
			}
			sameLeasesAsKine(t, ctx, kt.server, wantLeases)
			p, err := kt.Client.Put(ctx, "/registry/configmaps/ns-00/after-copy", "1")
			if err != nil || p.Header.Revision != r+1 {
				t.Errorf("put on the copy: %v %v, want revision %d", p, err, r+1)
			}
		})
	}

	// The copies only read kine: it is where it was.
	if again, rev := kineKeys(t, ctx, k, bytewise); rev != r || !cmp.Equal(again, want, protocmp.Transform()) {
		t.Errorf("kine changed during the copies: revision %d, was %d", rev, r)
	}
}

// sameAsKine compares kite's keys with kine's, field by field; versions,
// which kine does not keep, as explained at the top of this file.
func sameAsKine(t *testing.T, kine, kite *pb.RangeResponse) {
	t.Helper()
	want := proto.Clone(kine).(*pb.RangeResponse)
	want.Header = nil
	got := proto.Clone(kite).(*pb.RangeResponse)
	got.Header = nil
	var bad []string
	for i, kv := range want.Kvs {
		if kv.Version != 0 {
			continue // compact_rev_key: kine keeps kube-apiserver's version
		}
		if i >= len(got.Kvs) || !slices.Equal(got.Kvs[i].Key, kv.Key) {
			break // cmp.Diff below reports the missing or extra keys
		}
		v := got.Kvs[i].Version
		if kv.ModRevision == kv.CreateRevision && v != 1 || kv.ModRevision != kv.CreateRevision && v < 2 {
			bad = append(bad, fmt.Sprintf("%q (create %d, mod %d): version %d", kv.Key, kv.CreateRevision, kv.ModRevision, v))
		}
		kv.Version = v
	}
	if len(bad) > 0 {
		t.Errorf("%d keys have a version on the copy that etcd could not report (want 1 for a key never modified since its creation, else at least 2), for example:\n%s",
			len(bad), strings.Join(bad[:min(len(bad), 5)], "\n"))
	}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("keys at R differ (-kine +kite):\n%s", diff)
	}
}

// sameLeasesAsKine checks that the copy holds one lease per lease ID on
// kine's keys, granted for that many seconds (kine's ID = TTL), with
// exactly the keys that carry it on kine.
func sameLeasesAsKine(t *testing.T, ctx context.Context, kite *server, want map[int64][]string) {
	t.Helper()
	list, err := kite.Client.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, l := range list.Leases {
		ids = append(ids, int64(l.ID))
	}
	slices.Sort(ids)
	wantIDs := slices.Sorted(maps.Keys(want))
	if !slices.Equal(ids, wantIDs) {
		t.Errorf("leases on the copy %v, want the lease IDs of kine's keys %v", ids, wantIDs)
	}
	for _, id := range wantIDs {
		ttl, err := kite.Client.TimeToLive(ctx, clientv3.LeaseID(id), clientv3.WithAttachedKeys())
		if err != nil {
			t.Errorf("lease %d on the copy: %v", id, err)
			continue
		}
		var keys []string
		for _, k := range ttl.Keys {
			keys = append(keys, string(k))
		}
		slices.Sort(keys)
		if ttl.GrantedTTL != id || ttl.TTL <= 0 || ttl.TTL > id || !slices.Equal(keys, want[id]) {
			t.Errorf("lease %d on the copy: granted %d s, %d s left, %d keys; want granted %d s (kine's ID = TTL) and its %d keys on kine",
				id, ttl.GrantedTTL, ttl.TTL, len(keys), id, len(want[id]))
		}
	}
}
