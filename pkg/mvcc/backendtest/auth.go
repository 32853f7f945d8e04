package backendtest

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/kite-db/kite/pkg/mvcc"
)

func authStateOf(t *testing.T, tx mvcc.ReadTx) []byte {
	t.Helper()
	state, err := tx.AuthState(context.Background())
	if err != nil {
		t.Fatalf("AuthState: %v", err)
	}
	return state
}

// sameState reports a mismatch of two auth states, telling nil (never
// stored) from empty (stored empty), which equal does not.
func sameState(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if (got == nil) != (want == nil) || !bytes.Equal(got, want) {
		show := func(b []byte) string {
			switch {
			case b == nil:
				return "nil"
			case len(b) > 64:
				return string(b[:64]) + "..."
			}
			return string(b)
		}
		t.Errorf("%s: auth state of %d bytes %q, want %d bytes %q", what, len(got), show(got), len(want), show(want))
	}
}

func (h *harness) putAuthState(state []byte) {
	h.t.Helper()
	h.write(func(tx mvcc.WriteTx) {
		if err := tx.PutAuthState(context.Background(), state); err != nil {
			h.t.Fatalf("PutAuthState: %v", err)
		}
		sameState(h.t, "AuthState in the writing tx", authStateOf(h.t, tx), state)
	})
}

// testAuthState: the driver keeps the bytes of the last PutAuthState, as
// part of the write transaction, whatever their size, and nil until the
// first one.
func testAuthState(t *testing.T, e env) {
	h := newHarness(t, e.open(t))
	ctx := context.Background()
	h.read(func(tx mvcc.ReadTx) { sameState(t, "AuthState of an empty store", authStateOf(t, tx), nil) })
	h.commit(put("a", "1"))

	// Put, read in the same transaction, and after commit; a reader that
	// began before the commit keeps its snapshot.
	before, err := h.b.BeginRead(ctx)
	if err != nil {
		t.Fatalf("BeginRead: %v", err)
	}
	v1 := []byte("users: root; enabled")
	h.write(func(tx mvcc.WriteTx) {
		sameState(t, "AuthState in a write tx before any put", authStateOf(t, tx), nil)
		if err := tx.PutAuthState(ctx, v1); err != nil {
			t.Fatalf("PutAuthState: %v", err)
		}
		sameState(t, "AuthState in the writing tx", authStateOf(t, tx), v1)
		// The auth state changes without a new revision, as in etcd.
		equal(t, "Revisions in the writing tx", revisionsOf(t, tx), [2]int64{1, 0})
	})
	sameState(t, "AuthState of a reader begun before the commit", authStateOf(t, before), nil)
	if err := before.Rollback(); err != nil {
		t.Fatalf("read Rollback: %v", err)
	}
	h.read(func(tx mvcc.ReadTx) {
		sameState(t, "AuthState after commit", authStateOf(t, tx), v1)
		h.checkAgainstModel(tx, 1, [][2][]byte{all})
	})

	// A rolled back put leaves no trace.
	tx, err := h.b.BeginWrite(ctx)
	if err != nil {
		t.Fatalf("BeginWrite: %v", err)
	}
	if err := tx.PutAuthState(ctx, []byte("rolled back")); err != nil {
		t.Fatalf("PutAuthState: %v", err)
	}
	sameState(t, "AuthState in the tx to roll back", authStateOf(t, tx), []byte("rolled back"))
	if err := tx.Rollback(); err != nil {
		t.Fatalf("Rollback: %v", err)
	}
	h.read(func(tx mvcc.ReadTx) { sameState(t, "AuthState after rollback", authStateOf(t, tx), v1) })

	// Replacing, twice in one transaction: the last put wins.
	v2 := []byte("users: root, alice; enabled")
	h.write(func(tx mvcc.WriteTx) {
		for _, s := range [][]byte{[]byte("first"), v2} {
			if err := tx.PutAuthState(ctx, s); err != nil {
				t.Fatalf("PutAuthState: %v", err)
			}
		}
		sameState(t, "AuthState after two puts in one tx", authStateOf(t, tx), v2)
	})
	h.read(func(tx mvcc.ReadTx) { sameState(t, "AuthState after replace", authStateOf(t, tx), v2) })

	// A large state (many users and roles), with arbitrary bytes, then a
	// small one again and an empty one, which is not "never stored".
	large := make([]byte, 200<<10)
	rng := rand.New(rand.NewPCG(7, 7))
	for i := range large {
		large[i] = byte(rng.Uint32())
	}
	h.putAuthState(large)
	h.read(func(tx mvcc.ReadTx) { sameState(t, "AuthState of 200 KiB", authStateOf(t, tx), large) })
	h.putAuthState(v1)
	h.read(func(tx mvcc.ReadTx) { sameState(t, "AuthState after large", authStateOf(t, tx), v1) })
	h.putAuthState([]byte{})
	h.read(func(tx mvcc.ReadTx) { sameState(t, "empty AuthState", authStateOf(t, tx), []byte{}) })
	h.putAuthState(large)

	// Key writes leave it alone.
	h.commit(put("b", "2"), del("a"))
	h.read(func(tx mvcc.ReadTx) {
		sameState(t, "AuthState after key writes", authStateOf(t, tx), large)
		h.checkAgainstModel(tx, 1, [][2][]byte{all})
	})

	if e.reopen != nil {
		h.b = e.reopen(t, h.b)
		h.read(func(tx mvcc.ReadTx) { sameState(t, "AuthState after reopen", authStateOf(t, tx), large) })
	}
	if e.restore != nil {
		var buf bytes.Buffer
		rc, _, err := h.b.Snapshot(ctx)
		if err != nil {
			t.Fatalf("Snapshot: %v", err)
		}
		if _, err := io.Copy(&buf, rc); err != nil {
			t.Fatalf("read snapshot: %v", err)
		}
		if err := rc.Close(); err != nil {
			t.Fatalf("close snapshot: %v", err)
		}
		r := &harness{t: t, b: e.restore(t, &buf), m: h.m}
		r.read(func(tx mvcc.ReadTx) {
			sameState(t, "AuthState of a restored snapshot", authStateOf(t, tx), large)
			r.checkAgainstModel(tx, 1, [][2][]byte{all})
		})
	}
}
