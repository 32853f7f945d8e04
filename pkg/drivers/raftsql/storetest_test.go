package raftsql

import (
	"fmt"
	"testing"

	"github.com/kite-db/kite/pkg/mvcc/storetest"
)

// TestStoreModel runs a Store over a single-member cluster against the
// reference model: every write is proposed, committed by raft and applied
// back through Store.Apply, and every reopen restarts the member from its
// WAL and SQLite file; with Config.ApplyBehind too, the tail in memory
// over SQLite.
func TestStoreModel(t *testing.T) {
	for _, behind := range []bool{false, true} {
		t.Run(fmt.Sprintf("apply behind %v", behind), func(t *testing.T) {
			open, reopen := oneMemberOpeners(behind)
			storetest.Run(t, open, storetest.WithReopen(reopen))
		})
	}
}
