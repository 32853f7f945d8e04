// Package backendtest is the conformance suite every mvcc.Backend driver
// runs: one test body per behaviour of the interface, checked against a
// brute-force reference model of the revision log.
package backendtest

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/kite-db/kite/pkg/mvcc"
)

// Option adds a driver capability the suite can exercise.
type Option func(*config)

type config struct {
	reopen  func(t *testing.T, b mvcc.Backend) mvcc.Backend
	restore func(t *testing.T, snapshot io.Reader) mvcc.Backend
}

// WithReopen lets the suite check durability across a restart: fn closes b
// and opens the same storage again. Without it those tests are skipped.
func WithReopen(fn func(t *testing.T, b mvcc.Backend) mvcc.Backend) Option {
	return func(c *config) { c.reopen = fn }
}

// WithRestore lets the suite check that a Snapshot can be opened: fn opens a
// new backend whose data is the snapshot. Without it the suite only checks
// that Snapshot writes something.
func WithRestore(fn func(t *testing.T, snapshot io.Reader) mvcc.Backend) Option {
	return func(c *config) { c.restore = fn }
}

// SnapshotFile writes a snapshot to a file of its own in t's temporary
// directory and returns its path: every driver's snapshot is a SQLite
// database file, which a restore opens there.
func SnapshotFile(t *testing.T, snapshot io.Reader) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "restored.db")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(f, snapshot); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// env is what a test body gets.
type env struct {
	open func(t *testing.T) mvcc.Backend
	config
}

// Run runs the suite. open returns a new, empty backend and arranges for it
// to be closed when t ends (Close must tolerate being called twice).
func Run(t *testing.T, open func(t *testing.T) mvcc.Backend, opts ...Option) {
	e := env{open: open}
	for _, o := range opts {
		o(&e.config)
	}
	tests := []struct {
		name string
		fn   func(t *testing.T, e env)
	}{
		{"EmptyStore", testEmptyStore},
		{"PutGetOverwrite", testPutGetOverwrite},
		{"GetLatest", testGetLatest},
		{"DeleteHidesKeyFromLaterRevisions", testDeleteHidesKey},
		{"HistoricalRange", testHistoricalRange},
		{"Limit", testLimit},
		{"KeysOnly", testKeysOnly},
		{"Count", testCount},
		{"RangeEndConventions", testRangeEnd},
		{"Changes", testChanges},
		{"ChangesWithPrev", testChangesWithPrev},
		{"Leases", testLeases},
		{"LeaseKeysFollowLiveLease", testLeaseKeys},
		{"Alarms", testAlarms},
		{"AuthState", testAuthState},
		{"WriteTxSeesOwnWrites", testWriteSeesOwnWrites},
		{"DeleteAndPutInOneRevision", testDeleteAndPutInOneRevision},
		{"RollbackLeavesNoTrace", testRollback},
		{"ReadersAreIsolatedSnapshots", testReadIsolation},
		{"ReopenKeepsState", testReopen},
		{"CompactBatch", testCompact},
		{"CompactTwice", testCompactTwice},
		{"Snapshot", testSnapshot},
		{"SizeAndDefragment", testSizeDefragment},
		{"ModelSweep", testModelSweep},
		{"PrefetchChangesNoAnswer", testPrefetch},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, e) })
	}
}
