package raftsql

import (
	"testing"

	"github.com/kite-db/kite/pkg/mvcc/storetest"
)

// TestStoreModel runs a Store over a single-member cluster against the
// reference model: every write is proposed, committed by raft and applied
// back through Store.Apply, and every reopen restarts the member from its
// WAL and SQLite file.
func TestStoreModel(t *testing.T) {
	open, reopen := oneMemberOpeners()
	storetest.Run(t, open, storetest.WithReopen(reopen))
}
