package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/kite-db/kite/pkg/drivers/postgres"
	"github.com/kite-db/kite/pkg/drivers/postgres/pgtest"
	"github.com/kite-db/kite/pkg/mvcc"
	"github.com/kite-db/kite/pkg/mvcc/backendtest"
)

const waitFor = 10 * time.Second

// What every mvcc.Shared driver promises (notices, renewals, one primary,
// dense revisions under writers on both servers) is checked by
// backendtest.RunShared (TestSharedConformance below); the tests here are
// of what only this driver has: its LISTEN connection and its advisory
// lock connection, which an operator or a network can kill.

// commitNext, expectNotice and expectQuiet are backendtest's, as the
// driver's other tests use them.
func commitNext(t testing.TB, b mvcc.Backend, key string, extra func(tx mvcc.WriteTx, rev, compacted int64)) int64 {
	t.Helper()
	return backendtest.CommitNext(t, b, key, extra)
}

func expectNotice(t *testing.T, who string, ch <-chan mvcc.Notice, want mvcc.Notice) {
	t.Helper()
	backendtest.AwaitNotice(t, who, ch, want)
}

func expectQuiet(t *testing.T, who string, ch <-chan mvcc.Notice, d time.Duration) {
	t.Helper()
	backendtest.ExpectQuiet(t, who, ch, d)
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

// TestListenerReconnects: B's LISTEN connection dies; B reconnects, says
// notices may have been lost, and goes on delivering commits and
// renewals. A renewal of a lease the database does not hold tells nobody.
func TestListenerReconnects(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	a, b := mustOpen(t, dsn), mustOpen(t, dsn)
	ctx := context.Background()
	rev := commitNext(t, a, "k1", func(tx mvcc.WriteTx, _, _ int64) {
		if err := tx.PutLease(ctx, mvcc.Lease{ID: 7, TTL: 10}); err != nil {
			t.Fatal(err)
		}
	})
	expectNotice(t, "B", b.Notices(), mvcc.Notice{Rev: rev, Changed: mvcc.ChangedLeases})

	if n := terminate(t, dsn, "kite:listen:"+b.Origin()); n != 1 {
		t.Fatalf("terminated %d listener connections of B, want 1", n)
	}
	expectNotice(t, "B", b.Notices(), mvcc.Notice{Resync: true})
	rev = commitNext(t, a, "k2", nil)
	expectNotice(t, "B", b.Notices(), mvcc.Notice{Rev: rev})
	if err := a.RenewLease(ctx, 7); err != nil {
		t.Fatal(err)
	}
	expectNotice(t, "B", b.Notices(), mvcc.Notice{Renewed: 7})

	if err := a.RenewLease(ctx, 9); !errors.Is(err, mvcc.ErrLeaseNotFound) {
		t.Fatalf("RenewLease of an absent lease: %v, want %v", err, mvcc.ErrLeaseNotFound)
	}
	expectQuiet(t, "B", b.Notices(), 300*time.Millisecond)
}

// TestPrimaryLockConnectionKilled: the primary's lock connection dies; it
// steps down, and one of the servers (possibly itself, reconnected) takes
// the lock within seconds. (A primary that closes is RunShared's
// OnePrimary.)
func TestPrimaryLockConnectionKilled(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	bs := []*postgres.Backend{mustOpen(t, dsn), mustOpen(t, dsn)}
	holder := bs[backendtest.AwaitPrimary(t, bs[0], bs[1])]
	start := time.Now()
	if n := terminate(t, dsn, "kite:primary:"+holder.Origin()); n != 1 {
		t.Fatalf("terminated %d lock connections, want 1", n)
	}
	select {
	case v := <-holder.Primary():
		if v {
			t.Fatal("primary reported true again instead of stepping down")
		}
	case <-time.After(waitFor):
		t.Fatal("primary did not step down after its lock connection died")
	}
	backendtest.AwaitPrimary(t, bs[0], bs[1])
	t.Logf("failover after a killed lock connection took %v", time.Since(start).Round(time.Millisecond))
	backendtest.ExpectNoRoleChange(t, 1500*time.Millisecond, bs[0], bs[1])
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
	holder := backendtest.AwaitPrimary(t, bs[0], bs[1])
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
