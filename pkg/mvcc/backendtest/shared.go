package backendtest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	etcdpb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/kite-db/kite/pkg/mvcc"
)

// sharedWait bounds every wait for a notice or a role change: a primary
// chosen by a lease in the database may take a few seconds.
const sharedWait = 15 * time.Second

// RunShared checks what a driver that implements mvcc.Shared promises:
// open returns two Backends on one fresh storage, as two kite servers
// would open it, both closed by the test's cleanup (Close is called again
// by the checks that stop a Backend early).
func RunShared(t *testing.T, open func(t *testing.T) (a, b mvcc.Backend)) {
	shared := func(t *testing.T) (mvcc.Backend, mvcc.Backend, mvcc.Shared, mvcc.Shared) {
		a, b := open(t)
		sa, ok1 := a.(mvcc.Shared)
		sb, ok2 := b.(mvcc.Shared)
		if !ok1 || !ok2 {
			t.Fatal("the Backends do not implement mvcc.Shared")
		}
		return a, b, sa, sb
	}
	t.Run("Notices", func(t *testing.T) {
		a, b, sa, sb := shared(t)
		ctx := context.Background()
		rev := CommitNext(t, a, "k1", func(tx mvcc.WriteTx, _, _ int64) {
			must(t, tx.PutLease(ctx, mvcc.Lease{ID: 7, TTL: 10}))
		})
		AwaitNotice(t, "b", sb.Notices(), mvcc.Notice{Rev: rev, Changed: mvcc.ChangedLeases})
		ExpectQuiet(t, "a (its own commit)", sa.Notices(), 300*time.Millisecond)

		rev = CommitNext(t, b, "k2", func(tx mvcc.WriteTx, _, _ int64) {
			must(t, tx.PutAlarm(ctx, &etcdpb.AlarmMember{MemberID: 1, Alarm: etcdpb.AlarmType_NOSPACE}))
		})
		AwaitNotice(t, "a", sa.Notices(), mvcc.Notice{Rev: rev, Changed: mvcc.ChangedAlarms})
		rev = CommitNext(t, b, "k3", func(tx mvcc.WriteTx, rev, _ int64) {
			must(t, tx.SetRevisions(ctx, rev, rev-1))
			must(t, tx.PutAuthState(ctx, []byte("auth")))
		})
		AwaitNotice(t, "a", sa.Notices(), mvcc.Notice{Rev: rev, Changed: mvcc.ChangedCompacted | mvcc.ChangedAuth})
		rev = CommitNext(t, a, "k4", nil)
		AwaitNotice(t, "b", sb.Notices(), mvcc.Notice{Rev: rev})
	})
	t.Run("RenewLease", func(t *testing.T) {
		a, _, sa, sb := shared(t)
		ctx := context.Background()
		CommitNext(t, a, "k", func(tx mvcc.WriteTx, _, _ int64) {
			must(t, tx.PutLease(ctx, mvcc.Lease{ID: 7, TTL: 10}))
		})
		AwaitNotice(t, "b", sb.Notices(), mvcc.Notice{Changed: mvcc.ChangedLeases})
		must(t, sa.RenewLease(ctx, 7))
		AwaitNotice(t, "b", sb.Notices(), mvcc.Notice{Renewed: 7})
		if err := sa.RenewLease(ctx, 8); !errors.Is(err, mvcc.ErrLeaseNotFound) {
			t.Fatalf("RenewLease of a lease the storage does not hold: %v, want ErrLeaseNotFound", err)
		}
	})
	t.Run("LeaseExpired", func(t *testing.T) {
		// The renewal made through b is what keeps a's check from
		// revoking: 2.4 s after the grant, a 2 s lease renewed at 1.2 s is
		// not expired; 2.4 s after the renewal it is.
		a, b, _, sb := shared(t)
		ctx := context.Background()
		CommitNext(t, a, "k", func(tx mvcc.WriteTx, _, _ int64) {
			must(t, tx.PutLease(ctx, mvcc.Lease{ID: 9, TTL: 2}))
			if expired := leaseExpired(t, tx, 9); expired {
				t.Error("a lease granted in the checking transaction is expired")
			}
		})
		time.Sleep(1200 * time.Millisecond)
		must(t, sb.RenewLease(ctx, 9))
		time.Sleep(1200 * time.Millisecond)
		if checkExpired(t, a, 9) {
			t.Fatal("a lease renewed through the other Backend 1.2 s ago (TTL 2 s) is expired")
		}
		time.Sleep(1200 * time.Millisecond)
		if !checkExpired(t, b, 9) {
			t.Fatal("a 2 s lease last renewed 2.4 s ago is not expired")
		}
	})
	t.Run("OnePrimary", func(t *testing.T) {
		a, b, sa, sb := shared(t)
		p := AwaitPrimary(t, sa, sb)
		backends, roles := []mvcc.Backend{a, b}, []mvcc.Shared{sa, sb}
		ExpectNoRoleChange(t, 2*time.Second, sa, sb)
		// The primary stops: the other takes over.
		must(t, backends[p].Close())
		if _, ok := <-roles[p].Primary(); ok {
			t.Error("Primary channel still open after Close")
		}
		if q := AwaitPrimary(t, roles[1-p]); q != 0 {
			t.Fatal("unreachable")
		}
	})
	t.Run("AuthNotices", func(t *testing.T) {
		// A commit that stored the auth state tells the other servers so
		// (ChangedAuth), with or without a new revision, even on an empty
		// log, and they read the new state.
		a, b, sa, sb := shared(t)
		ctx := context.Background()
		authOnly := func(state string) {
			tx, err := a.BeginWrite(ctx)
			must(t, err)
			must(t, tx.PutAuthState(ctx, []byte(state)))
			must(t, tx.Commit())
		}
		readsAuth := func(want string) {
			t.Helper()
			tx, err := b.BeginRead(ctx)
			must(t, err)
			defer tx.Rollback()
			if got, err := tx.AuthState(ctx); err != nil || string(got) != want {
				t.Errorf("b reads auth state %q, %v; want %q", got, err, want)
			}
		}
		authOnly("v1") // a user added before the first key: revision 0
		AwaitNotice(t, "b", sb.Notices(), mvcc.Notice{Changed: mvcc.ChangedAuth})
		readsAuth("v1")
		rev := CommitNext(t, a, "k1", func(tx mvcc.WriteTx, _, _ int64) { must(t, tx.PutAuthState(ctx, []byte("v2"))) })
		AwaitNotice(t, "b", sb.Notices(), mvcc.Notice{Rev: rev, Changed: mvcc.ChangedAuth})
		readsAuth("v2")
		authOnly("v3") // the auth state changes without a new revision, as in etcd
		AwaitNotice(t, "b", sb.Notices(), mvcc.Notice{Rev: rev, Changed: mvcc.ChangedAuth})
		readsAuth("v3")
		rev = CommitNext(t, a, "k2", func(tx mvcc.WriteTx, _, _ int64) {
			must(t, tx.PutAuthState(ctx, []byte("v4")))
			must(t, tx.PutLease(ctx, mvcc.Lease{ID: 7, TTL: 10}))
		})
		AwaitNotice(t, "b", sb.Notices(), mvcc.Notice{Rev: rev, Changed: mvcc.ChangedAuth | mvcc.ChangedLeases})
		readsAuth("v4")
		// A rolled back put sends nothing; a commit without one says
		// nothing of auth (AwaitNotice fails on a Changed it did not want).
		tx, err := a.BeginWrite(ctx)
		must(t, err)
		must(t, tx.PutAuthState(ctx, []byte("rolled back")))
		must(t, tx.Rollback())
		rev = CommitNext(t, a, "k3", nil)
		AwaitNotice(t, "b", sb.Notices(), mvcc.Notice{Rev: rev})
		readsAuth("v4")
		ExpectQuiet(t, "a (its own commits)", sa.Notices(), 0)
	})
	t.Run("CloseWithUnreadNotices", func(t *testing.T) {
		// A Store that stopped reading its notices does not keep Close
		// from returning.
		a, b, sa, sb := shared(t)
		ctx := context.Background()
		CommitNext(t, a, "k", func(tx mvcc.WriteTx, _, _ int64) {
			must(t, tx.PutLease(ctx, mvcc.Lease{ID: 1, TTL: 60}))
		})
		for range 300 { // more than any notice buffer
			must(t, sa.RenewLease(ctx, 1))
		}
		time.Sleep(200 * time.Millisecond)
		done := make(chan error, 1)
		go func() { done <- b.Close() }()
		select {
		case err := <-done:
			must(t, err)
		case <-time.After(sharedWait):
			t.Fatal("Close blocked on unread notices")
		}
		for range sb.Notices() { // drains, then ends: the channel is closed
		}
		if _, ok := <-sb.Primary(); ok {
			t.Error("Primary channel still open after Close")
		}
	})
	t.Run("DenseRevisions", func(t *testing.T) {
		// Writers on both Backends at once: every revision is taken
		// exactly once, in commit order, with no gap.
		a, b, _, _ := shared(t)
		const perBackend, txs = 2, 40
		errs := make(chan error, 2*perBackend)
		for i := range 2 * perBackend {
			be := []mvcc.Backend{a, b}[i%2]
			go func() { errs <- writeKeys(be, i, txs) }()
		}
		for range 2 * perBackend {
			must(t, <-errs)
		}
		ctx := context.Background()
		tx, err := a.BeginRead(ctx)
		must(t, err)
		defer tx.Rollback()
		const n = 2 * perBackend * txs
		if cur, _, err := tx.Revisions(ctx); err != nil || cur != n {
			t.Errorf("current revision %d (%v), want %d", cur, err, n)
		}
		changes, err := tx.Changes(ctx, 1, n+10, 0, false)
		must(t, err)
		if len(changes) != n {
			t.Fatalf("%d rows in the log, want %d", len(changes), n)
		}
		for i, c := range changes {
			if c.KV.ModRevision != int64(i+1) {
				t.Fatalf("row %d has revision %d: revisions are not dense and unique", i, c.KV.ModRevision)
			}
		}
	})
}

// writeKeys commits txs transactions of one new key each through b, as
// writer w, each at the revision after the current one.
func writeKeys(b mvcc.Backend, w, txs int) error {
	ctx := context.Background()
	for j := range txs {
		tx, err := b.BeginWrite(ctx)
		if err != nil {
			return fmt.Errorf("writer %d, transaction %d: %w", w, j, err)
		}
		cur, comp, err := tx.Revisions(ctx)
		if err == nil {
			rev := cur + 1
			kv := &mvccpb.KeyValue{Key: fmt.Appendf(nil, "w%d/%03d", w, j), CreateRevision: rev,
				ModRevision: rev, Version: 1, Value: []byte("v")}
			err = tx.Put(ctx, kv, 0)
			if err == nil {
				err = tx.SetRevisions(ctx, rev, comp)
			}
		}
		if err != nil {
			tx.Rollback()
			return fmt.Errorf("writer %d, transaction %d: %w", w, j, err)
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("writer %d, transaction %d: commit: %w", w, j, err)
		}
	}
	return nil
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// CommitNext writes key at the next revision, runs extra in the same
// transaction, and returns the revision. It and the other exported
// helpers below are for a driver's own tests of what only it has (a
// killed listener connection, a primary lock's failover).
func CommitNext(t testing.TB, b mvcc.Backend, key string, extra func(tx mvcc.WriteTx, rev, compacted int64)) int64 {
	t.Helper()
	ctx := context.Background()
	tx, err := b.BeginWrite(ctx)
	must(t, err)
	cur, comp, err := tx.Revisions(ctx)
	must(t, err)
	rev := cur + 1
	kv := &mvccpb.KeyValue{Key: []byte(key), CreateRevision: rev, ModRevision: rev, Version: 1, Value: []byte("v")}
	must(t, tx.Put(ctx, kv, 0))
	must(t, tx.SetRevisions(ctx, rev, comp))
	if extra != nil {
		extra(tx, rev, comp)
	}
	must(t, tx.Commit())
	return rev
}

func leaseExpired(t *testing.T, tx mvcc.WriteTx, id int64) bool {
	t.Helper()
	lx, ok := tx.(mvcc.LeaseExpiryTx)
	if !ok {
		t.Fatal("the WriteTx of a Shared backend does not implement mvcc.LeaseExpiryTx")
	}
	expired, err := lx.LeaseExpired(context.Background(), id)
	must(t, err)
	return expired
}

func checkExpired(t *testing.T, b mvcc.Backend, id int64) bool {
	t.Helper()
	tx, err := b.BeginWrite(context.Background())
	must(t, err)
	defer tx.Rollback()
	return leaseExpired(t, tx, id)
}

// AwaitNotice waits for a notice matching want: the same Renewed, Resync
// and Changed, and a Rev at least want's. Other notices (a wake-up of a
// revision already told of, a heartbeat) may come first and are skipped.
func AwaitNotice(t *testing.T, who string, ch <-chan mvcc.Notice, want mvcc.Notice) {
	t.Helper()
	deadline := time.After(sharedWait)
	for {
		select {
		case got, ok := <-ch:
			if !ok {
				t.Fatalf("%s: notices closed, want %+v", who, want)
			}
			if got.Renewed == want.Renewed && got.Resync == want.Resync && got.Changed == want.Changed && got.Rev >= want.Rev {
				return
			}
			if got.Resync || got.Renewed != 0 && got.Renewed != want.Renewed || got.Changed&^want.Changed != 0 {
				t.Fatalf("%s: notice %+v while waiting for %+v", who, got, want)
			}
		case <-deadline:
			t.Fatalf("%s: no notice within %v, want %+v", who, sharedWait, want)
		}
	}
}

// ExpectQuiet fails if a notice arrives within d.
func ExpectQuiet(t *testing.T, who string, ch <-chan mvcc.Notice, d time.Duration) {
	t.Helper()
	select {
	case n := <-ch:
		t.Fatalf("%s: unexpected notice %+v", who, n)
	case <-time.After(d):
	}
}

// AwaitPrimary returns the index of the first of ss to report true.
func AwaitPrimary(t *testing.T, ss ...mvcc.Shared) int {
	t.Helper()
	deadline := time.After(sharedWait)
	for {
		for i, s := range ss {
			select {
			case v, ok := <-s.Primary():
				if ok && v {
					return i
				}
			default:
			}
		}
		select {
		case <-deadline:
			t.Fatalf("no primary within %v", sharedWait)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// ExpectNoRoleChange fails if any of ss reports a role within d.
func ExpectNoRoleChange(t *testing.T, d time.Duration, ss ...mvcc.Shared) {
	t.Helper()
	end := time.After(d)
	for {
		for i, s := range ss {
			select {
			case v, ok := <-s.Primary():
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
