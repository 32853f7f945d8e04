package test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kite-db/kite/pkg/drivers/mysql/mysqltest"
	"github.com/kite-db/kite/pkg/drivers/postgres/pgtest"
)

// TestDiskFullSQLite: kite on its embedded SQLite, its data directory on a
// small filesystem that fills up under writes. Writes then fail with an
// error that says the disk is full, and nothing else changes: reads and
// watches go on, every acknowledged write is there, and once space is freed
// writes succeed again without a restart. A SIGKILL and restart after that
// loses nothing acknowledged. (etcd itself stops on a full disk: its WAL
// write fails and the member exits.)
func TestDiskFullSQLite(t *testing.T) {
	disk := newSmallDisk(t, 24)
	k := startKiteIn(t, disk.Dir)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const prefix = "/diskfull/"
	wc := k.Client.Watch(ctx, prefix, clientv3.WithPrefix())
	if _, err := k.Client.Put(ctx, prefix+"first", "x"); err != nil {
		t.Fatal(err)
	}
	disk.fill(t, 2<<20)

	value := strings.Repeat("v", 4096)
	var acked []ack
	var full error
	for i := 0; full == nil; i++ {
		if i > 10000 {
			t.Fatalf("%d writes of 4 KiB fit on a disk with 2 MiB free", i)
		}
		key := fmt.Sprintf("%sk%05d", prefix, i)
		resp, err := k.Client.Put(ctx, key, value)
		if err != nil {
			full = err
			break
		}
		acked = append(acked, ack{key, value, resp.Header.Revision})
	}
	if status.Code(full) != codes.Unknown || !strings.Contains(full.Error(), "disk full") {
		t.Fatalf("a write on a full disk failed with %v; want the disk-full error", full)
	}
	t.Logf("%d writes acknowledged before the disk filled: %v", len(acked), full)
	// Every write fails alike while the disk is full, and changes nothing.
	rev := mustRev(t, k)
	for range 3 {
		if _, err := k.Client.Put(ctx, prefix+"more", value); err == nil {
			t.Fatal("a write succeeded on the full disk")
		}
	}
	if got := mustRev(t, k); got != rev {
		t.Fatalf("failed writes moved the revision from %d to %d", rev, got)
	}

	// Reads and watches still work, and hold every acknowledged write.
	checkAcks(ctx, t, k, acked)
	seen := map[string]int64{}
	for len(seen) < len(acked)+1 {
		select {
		case resp := <-wc:
			if err := resp.Err(); err != nil {
				t.Fatalf("watch ended on the full disk: %v", err)
			}
			for _, ev := range resp.Events {
				seen[string(ev.Kv.Key)] = ev.Kv.ModRevision
			}
		case <-ctx.Done():
			t.Fatalf("watch delivered %d of %d events", len(seen), len(acked)+1)
		}
	}
	for _, a := range acked {
		if seen[a.key] != a.rev {
			t.Fatalf("watch: %s at revision %d, acknowledged at %d", a.key, seen[a.key], a.rev)
		}
	}

	// Space back: writes resume without a restart.
	disk.release(t)
	var after int64
	waitUntil(t, 30*time.Second, "a write after space was freed", func() bool {
		resp, err := k.Client.Put(ctx, prefix+"after", "x")
		if err == nil {
			after = resp.Header.Revision
		}
		return err == nil
	})
	for {
		resp := <-wc
		if err := resp.Err(); err != nil {
			t.Fatalf("watch after space was freed: %v", err)
		}
		if n := len(resp.Events); n > 0 && resp.Events[n-1].Kv.ModRevision == after {
			break
		}
	}

	k.Kill()
	k.Restart()
	checkAcks(ctx, t, k, acked)
	resp, err := k.Client.Get(ctx, prefix+"after")
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].ModRevision != after {
		t.Fatalf("the write after the disk was freed, after a restart: %v, %v", resp, err)
	}
}

// TestDiskFullPostgres: kite on a Postgres server of the test's own whose
// data directory (tables and WAL) is on a small filesystem that fills up
// under writes. Which write of Postgres's hits the wall first decides what
// kite sees: a table that cannot grow fails the transaction with disk_full
// (53100), which kite answers as the disk-full error; a WAL segment that
// cannot be made is a PANIC, Postgres restarts, and if it cannot even
// finish recovery it stops, which kite answers as unavailable. What must
// hold either way is testDiskFullDatabase's.
func TestDiskFullPostgres(t *testing.T) {
	if againstEtcd {
		t.Skip("the database is Postgres")
	}
	disk := newSmallDisk(t, 64)
	pg := pgtest.NewClusterIn(t, disk.Dir)
	testDiskFullDatabase(t, disk, diskFullDB{
		name:     "Postgres",
		endpoint: pg.URL(),
		running:  func() bool { return pg.Running(t) },
		start:    func(t *testing.T) { pg.Start(t) },
	})
}

// TestDiskFullRaftSQLFollower: a raftsql follower whose data directory
// fills up stops, as a member whose apply fails does (it must not serve a
// state the others do not have, nor skip the entry); the other two go on.
// Once space is freed and it is restarted, it catches up from its WAL and
// its peers, entry by entry: HashKV agrees at the last revision.
func TestDiskFullRaftSQLFollower(t *testing.T) {
	if againstEtcd {
		t.Skip("the cluster is kite's raftsql")
	}
	// etcd's WAL preallocates its 64 MiB segment and the next one.
	disk := newSmallDisk(t, 192)
	const onDisk = 2
	c := startClusterOf(t, 3, &cluster{prepare: func(c *cluster, m *clusterMember) {
		if m == c.members[onDisk] {
			m.dataDir = disk.Dir
		}
	}})
	ctx := testCtx(t, 3*time.Minute)
	f := c.members[onDisk]
	if l := c.leaderIndex(t); l == onDisk {
		target := c.members[c.others(l)[0]]
		if _, err := f.Client.MoveLeader(ctx, target.memberID(t)); err != nil {
			t.Fatalf("move the leader off the small disk: %v", err)
		}
	}
	l := c.leaderIndex(t)
	leader := c.members[l]
	disk.fill(t, 1<<20)

	value := strings.Repeat("v", 4096)
	var last int64
	for i := 0; ; i++ {
		select {
		case <-f.exited:
		default:
			if i > 20000 {
				t.Fatalf("member %s still runs after %d writes on a disk with 1 MiB free", f.name, i)
			}
			resp, err := leader.Client.Put(ctx, fmt.Sprintf("/full/k%05d", i), value)
			if err != nil {
				t.Fatalf("put through the leader while a follower's disk fills: %v", err)
			}
			last = resp.Header.Revision
			continue
		}
		break
	}
	stopped := ""
	for _, line := range strings.Split(f.log.Tail(1<<20), "\n") {
		if strings.Contains(line, "raftsql node stopped") {
			stopped = line
		}
	}
	if !strings.Contains(stopped, "full") {
		t.Fatalf("member %s exited without saying its disk is full:\n%s", f.name, f.log.Tail(4096))
	}
	t.Logf("member %s stopped at revision %d: %s", f.name, last, stopped)
	// The two others are a quorum.
	for i := range 20 {
		resp, err := leader.Client.Put(ctx, fmt.Sprintf("/full/more%02d", i), value)
		if err != nil {
			t.Fatalf("put with one member down: %v", err)
		}
		last = resp.Header.Revision
	}

	disk.release(t)
	f.Kill()
	f.Restart()
	waitApplied(t, c, last)
	sameHashKV(t, ctx, c, last)
}

// TestDiskFullMySQL: kite on a MariaDB server of the test's own
// (mysqltest.NewServer) whose datadir (tablespaces, redo log) is on a
// small filesystem that fills up under writes. The redo log is a
// preallocated file that is overwritten in place, so what runs out is a
// tablespace that cannot grow, and the transaction fails with error 1114
// ("the table is full"), which kite answers as the disk-full error; should
// mariadbd stop instead, kite answers unavailable. What must hold
// either way is testDiskFullDatabase's.
func TestDiskFullMySQL(t *testing.T) {
	if againstEtcd {
		t.Skip("the database is MariaDB")
	}
	disk := newSmallDisk(t, 64)
	db := mysqltest.NewServer(t, disk.Dir)
	t.Logf("%d MiB free on the disk with mariadbd's datadir", disk.free(t)>>20)
	testDiskFullDatabase(t, disk, diskFullDB{
		name:     "mariadbd",
		endpoint: db.DSN("kite"),
		running:  db.Running,
		start:    func(t *testing.T) { db.Start(t) },
		logTail:  func() string { return db.LogTail(20) },
		strict:   true,
	})
}

// diskFullDB is a database server of the test's own whose data directory
// is on a small disk.
type diskFullDB struct {
	name     string // in messages: "Postgres", "mariadbd"
	endpoint string // kite's --datastore-endpoint
	running  func() bool
	start    func(t *testing.T)
	logTail  func() string // nil: the server keeps no log of its own to show
	// strict: every write on the full disk fails with the disk-full error
	// while the server runs (Postgres may answer a later one otherwise,
	// after a PANIC and a restart).
	strict bool
}

// testDiskFullDatabase is TestDiskFullPostgres and TestDiskFullMySQL: a
// kite server on db writes 4 KiB values until the disk is full; nothing
// acknowledged is lost, no failed write is applied, and once space is
// freed (and a server that stopped is started, as an operator would) the
// same kite server writes again, its watcher continues without a gap, and
// a SIGKILL and restart after that loses nothing.
func testDiskFullDatabase(t *testing.T, disk *smallDisk, db diskFullDB) {
	k := startKiteIn(t, t.TempDir(), "--datastore-endpoint", db.endpoint)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const prefix = "/diskfull/"
	wc := k.Client.Watch(ctx, prefix, clientv3.WithPrefix())
	first, err := k.Client.Put(ctx, prefix+"first", "x")
	if err != nil {
		t.Fatal(err)
	}
	disk.fill(t, 2<<20)

	// Incompressible: a database would store a repeated byte in a few bytes.
	rng := rand.New(rand.NewPCG(1, 2))
	random := func() string {
		b := make([]byte, 4096)
		for i := range b {
			b[i] = byte('a' + rng.IntN(26))
		}
		return string(b)
	}
	var acked []ack
	var full error
	for i := 0; full == nil; i++ {
		if i > 10000 {
			t.Fatalf("%d writes of 4 KiB fit on a disk with 2 MiB free", i)
		}
		key, value := fmt.Sprintf("%sk%05d", prefix, i), random()
		pctx, pcancel := context.WithTimeout(ctx, 20*time.Second)
		resp, err := k.Client.Put(pctx, key, value)
		pcancel()
		if err != nil {
			full = err
			break
		}
		acked = append(acked, ack{key, value, resp.Header.Revision})
	}
	diskFull := strings.Contains(full.Error(), "disk full")
	if !diskFull && status.Code(full) != codes.Unavailable {
		t.Fatalf("a write on a full disk failed with %v; want the disk-full error, or unavailable if %s stopped", full, db.name)
	}
	t.Logf("%d writes acknowledged before the disk filled; then %v (%s running: %v)", len(acked), full, db.name, db.running())
	if diskFull {
		// The server still runs: reads work and every write fails alike.
		rev := mustRev(t, k)
		for range 3 {
			if _, err := k.Client.Put(ctx, prefix+"more", random()); err == nil {
				t.Fatal("a write succeeded on the full disk")
			} else if db.strict && !strings.Contains(err.Error(), "disk full") {
				t.Errorf("a write on the full disk failed with %v; want the disk-full error", err)
			}
		}
		if got := mustRev(t, k); got != rev {
			t.Fatalf("failed writes moved the revision from %d to %d", rev, got)
		}
		checkAcks(ctx, t, k, acked)
	}

	disk.release(t)
	if !db.running() {
		if db.logTail != nil {
			t.Logf("%s stopped on the full disk; its log ends:\n%s", db.name, db.logTail())
		}
		db.start(t)
	}
	var after int64
	waitUntil(t, 60*time.Second, "a write after space was freed", func() bool {
		pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
		defer pcancel()
		resp, err := k.Client.Put(pctx, prefix+"after", "x")
		if err == nil {
			after = resp.Header.Revision
		}
		return err == nil
	})
	checkAcks(ctx, t, k, acked)
	// The watcher saw every acknowledged write once, in order, and then
	// the write after the heal: no gap across the full disk or a restart
	// of the database server.
	want := append([]ack{{prefix + "first", "x", first.Header.Revision}}, acked...)
	var got []ack
	for len(got) == 0 || got[len(got)-1].rev < after {
		select {
		case resp := <-wc:
			if err := resp.Err(); err != nil {
				t.Fatalf("watch ended: %v", err)
			}
			for _, ev := range resp.Events {
				got = append(got, ack{string(ev.Kv.Key), string(ev.Kv.Value), ev.Kv.ModRevision})
			}
		case <-ctx.Done():
			t.Fatalf("watch delivered %d events, not up to revision %d", len(got), after)
		}
	}
	if len(got) != len(want)+1 {
		t.Fatalf("watch delivered %d events, want %d acknowledged and the one after", len(got), len(want)+1)
	}
	for i, w := range want {
		if got[i] != w {
			t.Fatalf("watch event %d: %s at %d, want %s at %d", i, got[i].key, got[i].rev, w.key, w.rev)
		}
	}

	k.Kill()
	k.Restart()
	checkAcks(ctx, t, k, acked)
}
