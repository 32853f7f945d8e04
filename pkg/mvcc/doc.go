// Package mvcc is etcd's key-value state machine over SQL storage: the
// meaning of every request (revisions, versions, compares, leases,
// compaction), the group-committed write path, and the watch hub. It knows
// nothing of SQL dialects or raft: a driver implements Backend (backend.go)
// and stores the rows this package computes.
//
// # The shape
//
// A Store keeps one rule in every storage mode: it follows an ordered feed
// of committed revisions, and everything it keeps in memory (the current
// and compacted revisions, the watch hub, the lease clocks, the alarms, the
// auth store) is derived from that feed, on one goroutine, in revision
// order. Only how writes are put in order differs, and that is one value
// chosen when the Store opens, its sequencer (sequencer*.go):
//
//   - localSequencer: the Store is its storage's only writer (sqlite);
//   - sharedSequencer: several Stores write one storage (postgres, Shared);
//   - replicatedSequencer: a replicated log orders writes (raftsql,
//     Replicator).
//
// No other code asks which mode it runs in.
//
// # A Put, step by step
//
// Every Put goes through the same named steps; the sequencer decides only
// how it reaches the writer.
//
//  1. Store.Put admits the request (the quota and alarms, quota.go) and
//     hands it to the sequencer's write.
//  2. Ordering. Local and shared: the request becomes a writeJob on the
//     writer's queue (writer.go). Replicated: it is proposed to the log
//     (Replicator.Propose); once the log commits it, the replicator calls
//     Store.Apply on every node, which queues an entriesJob holding it.
//  3. The writer (writeLoop, writer.go) takes every writeJob waiting into one
//     batch; any other job (an entriesJob, a compaction step, a catch-up with
//     a shared storage) runs alone, between batches, in queue order.
//  4. The commit tail (commit.go) applies the batch in one transaction: the
//     evaluator (apply.go, txn.go) evaluates each request against the
//     transaction and turns it into rows; lease and auth changes are only
//     staged. On a shared storage BeginWrite takes the storage's revision
//     lock, so commit order is revision order across servers; a replicated
//     batch also records its last entry's index. One COMMIT makes it durable.
//  5. Only then does memory follow: the staged leases and auth changes
//     become live, the alarms and compacted revision move.
//  6. The publish step (Store.publish) moves the current revision and hands
//     each revision's events to the watch hub. A shared storage's revisions
//     committed by other servers reach the same step through the feed
//     (feed.go): a notice, then one read of the log after the last revision
//     published.
//  7. The caller is answered: the writeJob is done, or the entriesJob's
//     outcome goes back to the replicator, which answers the proposer.
//
// A storage error in step 4 leaves no trace. A client batch is answered
// with it; a replicated entry is answered with it only when it is a limit
// every node hits alike (ErrTooManyChanges), otherwise the node stops
// rather than differ from the others, and replays the entry from its log
// after a restart.
//
// # Reads
//
// Reads never wait for the writer: each opens a read snapshot of the
// storage (or, for a latest single-key get, one GetLatest), after the
// sequencer's read barrier when it must be linearizable (a replicated log's
// ReadIndex; nothing elsewhere, since every acknowledged write committed
// before its answer). The read caches (reads.go) spare a paginated list
// its repeated counts and read its next pages ahead; none changes an
// answer.
package mvcc
