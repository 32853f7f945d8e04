//go:build !kitetest

package sqlite

// writeFault holds nothing in a release build: the fault hook
// (writefault_testhooks.go, FailNextWrite) exists only with -tags
// kitetest, so a Put or Delete of a production binary checks nothing and
// nothing can make it fail on purpose.
type writeFault struct{}

func (writeFault) take() error { return nil }
