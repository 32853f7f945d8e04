package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/kite-db/kite/pkg/drivers/postgres"
	"github.com/kite-db/kite/pkg/drivers/postgres/pgtest"
	"github.com/kite-db/kite/pkg/mvcc"
	"github.com/kite-db/kite/pkg/mvcc/backendtest"
)

const waitFor = 10 * time.Second

// commitNext writes key at the next revision, runs extra in the same
// transaction, and returns the revision.
func commitNext(t testing.TB, b mvcc.Backend, key string, extra func(tx mvcc.WriteTx, rev, compacted int64)) int64 {
	t.Helper()
	ctx := context.Background()
	tx, err := b.BeginWrite(ctx)
	if err != nil {
		t.Fatalf("BeginWrite: %v", err)
	}
	cur, comp, err := tx.Revisions(ctx)
	if err != nil {
		t.Fatalf("Revisions: %v", err)
	}
	rev := cur + 1
	kv := &mvccpb.KeyValue{Key: []byte(key), CreateRevision: rev, ModRevision: rev, Version: 1, Value: []byte("v")}
	if err := tx.Put(ctx, kv, 0); err != nil {
		t.Fatalf("Put: %v", err)
	}
	if err := tx.SetRevisions(ctx, rev, comp); err != nil {
		t.Fatalf("SetRevisions: %v", err)
	}
	if extra != nil {
		extra(tx, rev, comp)
	}
	if err := tx.Commit(); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	return rev
}

func expectNotice(t *testing.T, who string, ch <-chan mvcc.Notice, want mvcc.Notice) {
	t.Helper()
	select {
	case got, ok := <-ch:
		if !ok {
			t.Fatalf("%s: notices closed, want %+v", who, want)
		}
		if got != want {
			t.Fatalf("%s: notice %+v, want %+v", who, got, want)
		}
	case <-time.After(waitFor):
		t.Fatalf("%s: no notice within %v, want %+v", who, waitFor, want)
	}
}

func expectQuiet(t *testing.T, who string, ch <-chan mvcc.Notice, d time.Duration) {
	t.Helper()
	select {
	case n := <-ch:
		t.Fatalf("%s: unexpected notice %+v", who, n)
	case <-time.After(d):
	}
}

// terminate ends the backends of the connections named app, as an
// operator or a failing network would, and returns how many there were.
func terminate(t *testing.T, dsn, app string) int {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	err = conn.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name = $1`, app).Scan(&n)
	if err != nil {
		t.Fatalf("terminate %s: %v", app, err)
	}
	return n
}

func TestSharedNotices(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	a, b := mustOpen(t, dsn), mustOpen(t, dsn)
	ctx := context.Background()

	rev := commitNext(t, a, "k1", func(tx mvcc.WriteTx, _, _ int64) {
		if err := tx.PutLease(ctx, mvcc.Lease{ID: 7, TTL: 10}); err != nil {
			t.Fatal(err)
		}
	})
	expectNotice(t, "B", b.Notices(), mvcc.Notice{Rev: rev, Changed: mvcc.ChangedLeases})

	rev = commitNext(t, a, "k2", func(tx mvcc.WriteTx, rev, _ int64) {
		if err := tx.PutAlarm(ctx, &etcdserverpb.AlarmMember{MemberID: 1, Alarm: etcdserverpb.AlarmType_NOSPACE}); err != nil {
			t.Fatal(err)
		}
		if err := tx.SetRevisions(ctx, rev, 1); err != nil {
			t.Fatal(err)
		}
	})
	expectNotice(t, "B", b.Notices(), mvcc.Notice{Rev: rev, Changed: mvcc.ChangedAlarms | mvcc.ChangedCompacted})

	// A rolled back transaction sends nothing; B's commit reaches A.
	tx, err := a.BeginWrite(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.PutLease(ctx, mvcc.Lease{ID: 8, TTL: 10}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	rev = commitNext(t, b, "k3", nil)
	expectNotice(t, "A", a.Notices(), mvcc.Notice{Rev: rev})

	if err := a.RenewLease(ctx, 7); err != nil {
		t.Fatalf("RenewLease: %v", err)
	}
	expectNotice(t, "B", b.Notices(), mvcc.Notice{Renewed: 7})
	// Nobody hears itself.
	expectQuiet(t, "A", a.Notices(), 300*time.Millisecond)
	expectQuiet(t, "B", b.Notices(), 0)

	// B's listener connection dies: B reconnects, says notices may be
	// lost, and goes on delivering.
	if n := terminate(t, dsn, "kite:listen:"+b.Origin()); n != 1 {
		t.Fatalf("terminated %d listener connections of B, want 1", n)
	}
	expectNotice(t, "B", b.Notices(), mvcc.Notice{Resync: true})
	rev = commitNext(t, a, "k4", nil)
	expectNotice(t, "B", b.Notices(), mvcc.Notice{Rev: rev})
	if err := a.RenewLease(ctx, 7); err != nil {
		t.Fatal(err)
	}
	expectNotice(t, "B", b.Notices(), mvcc.Notice{Renewed: 7})

	// A renewal is recorded in the lease's row: a lease the database does
	// not hold is not renewed, and nobody is told.
	if err := a.RenewLease(ctx, 9); !errors.Is(err, mvcc.ErrLeaseNotFound) {
		t.Fatalf("RenewLease of an absent lease: %v, want %v", err, mvcc.ErrLeaseNotFound)
	}
	expectQuiet(t, "B", b.Notices(), 300*time.Millisecond)
}

// TestSharedAuthNotices: a commit that stored the auth state tells the
// other servers so (ChangedAuth), with or without a new revision, even on
// an empty log, and they read the new state.
func TestSharedAuthNotices(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	a, b := mustOpen(t, dsn), mustOpen(t, dsn)
	ctx := context.Background()
	putAuth := func(tx mvcc.WriteTx, state string) {
		if err := tx.PutAuthState(ctx, []byte(state)); err != nil {
			t.Fatal(err)
		}
	}
	authOnly := func(state string) {
		tx, err := a.BeginWrite(ctx)
		if err != nil {
			t.Fatal(err)
		}
		putAuth(tx, state)
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	readsAuth := func(want string) {
		t.Helper()
		tx, err := b.BeginRead(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if got, err := tx.AuthState(ctx); err != nil || string(got) != want {
			t.Errorf("B reads auth state %q, %v; want %q", got, err, want)
		}
	}

	// A user added before the first key: revision 0.
	authOnly("v1")
	expectNotice(t, "B", b.Notices(), mvcc.Notice{Changed: mvcc.ChangedAuth})
	readsAuth("v1")

	rev := commitNext(t, a, "k1", func(tx mvcc.WriteTx, _, _ int64) { putAuth(tx, "v2") })
	expectNotice(t, "B", b.Notices(), mvcc.Notice{Rev: rev, Changed: mvcc.ChangedAuth})
	readsAuth("v2")

	// The auth state changes without a new revision, as in etcd.
	authOnly("v3")
	expectNotice(t, "B", b.Notices(), mvcc.Notice{Rev: rev, Changed: mvcc.ChangedAuth})
	readsAuth("v3")

	rev = commitNext(t, a, "k2", func(tx mvcc.WriteTx, _, _ int64) {
		putAuth(tx, "v4")
		if err := tx.PutLease(ctx, mvcc.Lease{ID: 7, TTL: 10}); err != nil {
			t.Fatal(err)
		}
	})
	expectNotice(t, "B", b.Notices(), mvcc.Notice{Rev: rev, Changed: mvcc.ChangedAuth | mvcc.ChangedLeases})
	readsAuth("v4")

	// A rolled back put sends nothing; a commit without one says nothing
	// of auth.
	tx, err := a.BeginWrite(ctx)
	if err != nil {
		t.Fatal(err)
	}
	putAuth(tx, "rolled back")
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	rev = commitNext(t, a, "k3", nil)
	expectNotice(t, "B", b.Notices(), mvcc.Notice{Rev: rev})
	readsAuth("v4")
	expectQuiet(t, "A", a.Notices(), 0)
}

// TestCloseWithUnreadNotices: a Store that stopped reading its notices
// does not keep Close from returning.
func TestCloseWithUnreadNotices(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	a, c := mustOpen(t, dsn), mustOpen(t, dsn)
	ctx := context.Background()
	commitNext(t, a, "k", func(tx mvcc.WriteTx, _, _ int64) {
		if err := tx.PutLease(ctx, mvcc.Lease{ID: 1, TTL: 60}); err != nil {
			t.Fatal(err)
		}
	})
	for range 300 { // more than the notice buffer
		if err := a.RenewLease(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(200 * time.Millisecond)
	done := make(chan error, 1)
	go func() { done <- c.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(waitFor):
		t.Fatal("Close blocked on unread notices")
	}
	for range c.Notices() { // drains, then ends: the channel is closed
	}
	if _, ok := <-c.Primary(); ok {
		t.Error("Primary channel still open after Close")
	}
}

// awaitPrimary returns the index of the first of bs to report true.
func awaitPrimary(t *testing.T, bs ...*postgres.Backend) int {
	t.Helper()
	deadline := time.After(waitFor)
	for {
		for i, b := range bs {
			select {
			case v, ok := <-b.Primary():
				if ok && v {
					return i
				}
			default:
			}
		}
		select {
		case <-deadline:
			t.Fatalf("no primary within %v", waitFor)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func expectNoRoleChange(t *testing.T, d time.Duration, bs ...*postgres.Backend) {
	t.Helper()
	end := time.After(d)
	for {
		for i, b := range bs {
			select {
			case v, ok := <-b.Primary():
				if ok {
					t.Fatalf("backend %d: unexpected role change to %v", i, v)
				}
			default:
			}
		}
		select {
		case <-end:
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func TestPrimaryFailover(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	bs := []*postgres.Backend{mustOpen(t, dsn), mustOpen(t, dsn)}
	first := awaitPrimary(t, bs...)
	other := 1 - first
	// Exactly one: the other keeps trying and failing.
	expectNoRoleChange(t, 2500*time.Millisecond, bs...)

	start := time.Now()
	if err := bs[first].Close(); err != nil {
		t.Fatal(err)
	}
	if got := awaitPrimary(t, bs[other]); got != 0 {
		t.Fatal("unreachable")
	}
	t.Logf("failover after Close took %v", time.Since(start).Round(time.Millisecond))

	// The primary's lock connection dies: it steps down, and one of the
	// servers (possibly itself, reconnected) takes the lock within seconds.
	survivor := bs[other]
	third := mustOpen(t, dsn)
	start = time.Now()
	if n := terminate(t, dsn, "kite:primary:"+survivor.Origin()); n != 1 {
		t.Fatalf("terminated %d lock connections, want 1", n)
	}
	select {
	case v := <-survivor.Primary():
		if v {
			t.Fatal("primary reported true again instead of stepping down")
		}
	case <-time.After(waitFor):
		t.Fatal("primary did not step down after its lock connection died")
	}
	awaitPrimary(t, survivor, third)
	t.Logf("failover after a killed lock connection took %v", time.Since(start).Round(time.Millisecond))
	expectNoRoleChange(t, 1500*time.Millisecond, survivor, third)
}

// TestPrimaryHandoverOverlap measures the window in which two servers both
// believe they are primary: the holder's lock connection is killed, which
// frees the lock at once, and the other server may take it (it tries every
// second) before the holder's next check (every second) tells it it lost
// it. The window is harmless because the once-only jobs are decided inside
// their transactions: an expiry revoke checks the lease's last renewal in
// the database (TestTwoPrimariesNeverRevokeARenewedLease), and
// compaction's steps are idempotent deletes under the revision lock.
func TestPrimaryHandoverOverlap(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	bs := []*postgres.Backend{mustOpen(t, dsn), mustOpen(t, dsn)}
	holder := awaitPrimary(t, bs...)
	var worst time.Duration
	for round := range 5 {
		if n := terminate(t, dsn, "kite:primary:"+bs[holder].Origin()); n != 1 {
			t.Fatalf("round %d: terminated %d lock connections, want 1", round, n)
		}
		var downAt, upAt time.Time
		winner := -1
		deadline := time.After(waitFor)
		for downAt.IsZero() || winner < 0 {
			select {
			case v := <-bs[holder].Primary():
				if !v {
					downAt = time.Now()
				} else {
					winner, upAt = holder, time.Now()
				}
			case v := <-bs[1-holder].Primary():
				if v {
					winner, upAt = 1-holder, time.Now()
				}
			case <-deadline:
				t.Fatalf("round %d: no handover within %v (stepped down: %v, new primary: %d)", round, waitFor, !downAt.IsZero(), winner)
			}
		}
		if winner == holder {
			t.Logf("round %d: the holder took the lock back after reconnecting", round)
			continue
		}
		overlap := downAt.Sub(upAt)
		worst = max(worst, overlap)
		t.Logf("round %d: both primary for %v (negative: no overlap)", round, overlap.Round(time.Millisecond))
		holder = winner
	}
	t.Logf("longest overlap: %v", worst.Round(time.Millisecond))
}

func TestConcurrentWritersDenseRevisions(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	const writers, txs = 3, 40
	bs := make([]*postgres.Backend, writers)
	for i := range bs {
		bs[i] = mustOpen(t, dsn)
	}
	errs := make(chan error, writers)
	for i, b := range bs {
		go func() {
			errs <- func() error {
				ctx := context.Background()
				for j := range txs {
					tx, err := b.BeginWrite(ctx)
					if err != nil {
						return err
					}
					cur, comp, err := tx.Revisions(ctx)
					if err != nil {
						return err
					}
					rev := cur + 1
					kv := &mvccpb.KeyValue{Key: fmt.Appendf(nil, "w%d/%03d", i, j), CreateRevision: rev,
						ModRevision: rev, Version: 1, Value: []byte("v")}
					if err := tx.Put(ctx, kv, 0); err != nil {
						return err
					}
					if err := tx.SetRevisions(ctx, rev, comp); err != nil {
						return err
					}
					if err := tx.Commit(); err != nil {
						return fmt.Errorf("writer %d commit %d: %w", i, j, err)
					}
				}
				return nil
			}()
		}()
	}
	for range writers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	tx, err := bs[0].BeginRead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	const n = writers * txs
	if cur, _, _ := tx.Revisions(ctx); cur != n {
		t.Errorf("current revision %d, want %d", cur, n)
	}
	changes, err := tx.Changes(ctx, 1, n+10, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(changes) != n {
		t.Fatalf("%d rows in the log, want %d", len(changes), n)
	}
	for i, c := range changes {
		if c.KV.ModRevision != int64(i+1) {
			t.Fatalf("row %d has revision %d: revisions are not dense and unique", i, c.KV.ModRevision)
		}
	}
}

func TestConcurrentSchemaCreation(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	const n = 3
	type result struct {
		b   *postgres.Backend
		err error
	}
	results := make(chan result, n)
	for range n {
		go func() {
			b, err := postgres.Open(context.Background(), dsn, postgres.Options{})
			results <- result{b, err}
		}()
	}
	for range n {
		r := <-results
		if r.err != nil {
			t.Errorf("Open: %v", r.err)
			continue
		}
		if err := r.b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var rows, revRows int
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM kite_schema), (SELECT count(*) FROM kite_revision)`).
		Scan(&rows, &revRows); err != nil {
		t.Fatal(err)
	}
	if rows != 1 || revRows != 1 {
		t.Errorf("kite_schema has %d rows, kite_revision %d; want 1 each", rows, revRows)
	}
}

// TestSharedConformance runs the checks every mvcc.Shared driver passes.
func TestSharedConformance(t *testing.T) {
	backendtest.RunShared(t, func(t *testing.T) (mvcc.Backend, mvcc.Backend) {
		dsn := pgtest.NewDatabase(t)
		return mustOpen(t, dsn), mustOpen(t, dsn)
	})
}
