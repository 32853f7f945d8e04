package sqlite

import (
	"fmt"
	"math"

	"github.com/kite-db/kite/pkg/mvcc"
)

// A log row's id (kv's INTEGER PRIMARY KEY, SQLite's rowid) is its position
// in the log, rev<<subBits | sub. The writer appends in (revision,
// sub-revision) order, so ids only grow and id order is (rev, sub) order:
// the log is one B-tree keyed by position, with no second index on (rev,
// sub). live stores the id of a key's row, so reading a value is one rowid
// seek; Changes and CompactBatch walk an id range; the key index
// (keyindex.go) holds each key's ids, which are its (rev, sub) in order.
//
// The bounds: at most maxSub+1 (1,048,576) changes in one revision (a
// DeleteRange or lease revoke of more keys fails with mvcc.ErrTooManyChanges and
// changes nothing) and revisions up to maxRev (2^43-1, 8.8e12: 27 years at
// 10,000 revisions a second).
const (
	subBits = 20
	maxSub  = 1<<subBits - 1
	maxRev  = math.MaxInt64 >> subBits
)

// rowID is the id of the row at rev/sub, or an error beyond the bounds.
func rowID(rev, sub int64) (int64, error) {
	switch {
	case sub < 0 || sub > maxSub:
		return 0, fmt.Errorf("%w: revision %d: change %d is beyond the %d changes one revision can hold "+
			"in this SQLite schema (delete fewer keys per request)", mvcc.ErrTooManyChanges, rev, sub, maxSub+1)
	case rev < 0 || rev > maxRev:
		return 0, fmt.Errorf("revision %d is beyond the largest revision this SQLite schema stores (%d)", rev, maxRev)
	}
	return rev<<subBits | sub, nil
}

// checkChanges refuses change sub of revision rev beyond limit changes
// (Options.MaxChangesPerRevision; none when limit is 0), as rowID refuses
// one beyond the schema's bound.
func checkChanges(rev, sub, limit int64) error {
	if limit > 0 && sub >= limit {
		return fmt.Errorf("%w: revision %d: change %d is beyond the %d changes one revision may hold "+
			"(Options.MaxChangesPerRevision; delete fewer keys per request)", mvcc.ErrTooManyChanges, rev, sub, limit)
	}
	return nil
}

// revOf and subOf split an id.
func revOf(id int64) int64 { return id >> subBits }
func subOf(id int64) int64 { return id & maxSub }

// firstID is the smallest id a row of revision rev (or a later one) can
// have; lastID the largest id of a row of revision rev or earlier. Both
// clamp, so any revision a caller passes is a valid bound.
func firstID(rev int64) int64 {
	switch {
	case rev <= 0:
		return 0
	case rev > maxRev:
		return math.MaxInt64
	}
	return rev << subBits
}

func lastID(rev int64) int64 {
	switch {
	case rev < 0:
		return -1
	case rev >= maxRev:
		return math.MaxInt64
	}
	return rev<<subBits | maxSub
}
