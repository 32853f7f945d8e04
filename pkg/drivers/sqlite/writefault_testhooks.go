//go:build kitetest

package sqlite

import "sync/atomic"

// writeFault is the error the next Put or Delete fails with, in a build
// with -tags kitetest only (writefault.go is the release build's, which
// checks nothing on the write path).
type writeFault struct{ err atomic.Pointer[error] }

// take returns the error FailNextWrite set, once.
func (f *writeFault) take() error {
	if p := f.err.Swap(nil); p != nil {
		return *p
	}
	return nil
}

// FailNextWrite makes the next Put or Delete of a write transaction fail
// with err, as if SQLite had refused its statement: the transaction is
// poisoned and rolls back, as after a real storage error. raftsql's
// fail-apply hook and this package's tests use it to fail one write
// where it happens, inside the transaction.
func (b *Backend) FailNextWrite(err error) { b.writeFault.err.Store(&err) }
