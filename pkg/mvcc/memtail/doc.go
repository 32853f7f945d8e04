// Package memtail keeps the newest committed write transactions of a
// Backend in memory and applies them to it later, in large transactions,
// off the path that acknowledges a write.
//
// Why: a SQLite COMMIT costs the same few page writes whether it holds one
// write or a thousand, and in kite's SQLite modes that COMMIT sat on every
// acknowledgement. etcd acknowledges after its WAL is synced and applies
// into bbolt's in-memory batch, committed every 100 ms; its readers merge
// that batch's uncommitted buffer. memtail is kite's version of that
// buffer: a Backend decorator whose write transactions end in memory
// ("the tail"), whose reads merge the tail over the wrapped Backend's
// committed state, and whose flusher moves the tail's oldest transactions
// into the wrapped Backend in one transaction each time.
//
// Durability is not memtail's: the tail is lost with the process. It is
// meant to sit behind a durable log of the same transactions (raftsql's
// raft WAL, or a log of its own in SQLite mode) that is replayed from the
// wrapped Backend's applied index after a restart. Every flush records,
// with SetAppliedIndex, the index of the newest transaction it applied, so
// the wrapped Backend always says which transactions it holds.
//
// What a read sees: exactly what the wrapped Backend would answer had every
// committed transaction been applied to it. A read transaction takes the
// tail as it is (the tail is a list of immutable batches, so a flush never
// changes what an open read sees) and then opens a read of the wrapped
// Backend; the batches that read's applied index already includes are
// skipped, the rest are merged over it.
//
// What the writer reads: the rows it replaces (a put's previous row, the
// key a delete removes) come from its own open batch, else from a cache
// of the newest rows of keys it wrote or read lately (rowcache.go), else
// from the tail, else from the base, whose read it opens only then. The
// cache is exact because every change goes through the one writer and
// the cache changes only when a batch is committed; it is bounded, and a
// key it does not hold is read as before. A key that is not live at all
// (a creation) is not read either: the writer knows every live key by a
// hash (livekeys.go), loaded from the base when the Backend opens.
package memtail
