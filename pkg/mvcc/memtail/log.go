package memtail

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// The log is a directory of segment files, each named by the index of its
// first batch (%016x.log). A record is
//
//	length  uint32   of index and payload
//	crc     uint32   Castagnoli, of index and payload
//	index   uint64
//	payload          encodeBatch's bytes
//
// little-endian. A segment grows in preallocated chunks of zeros, so an
// append mostly writes inside the file's size and its fdatasync has no
// size to record (etcd's WAL preallocates for the same reason); a record
// whose length is 0 is the end of a segment's data. The chunks are small
// (logChunk) rather than etcd's 64 MiB so that a small disk keeps room,
// and a failure to grow one fails the append before anything is written,
// so the log stays usable once space is freed.
const (
	logHeader   = 16
	logChunk    = 4 << 20
	logSegBytes = 64 << 20 // a segment is closed once its data passes this
)

var logCRC = crc32.MakeTable(crc32.Castagnoli)

// fileLog is the durable log of committed batches.
type fileLog struct {
	dir string
	log *slog.Logger

	mu sync.Mutex // guards the fields below: the writer appends, the flusher releases

	f      *os.File // the segment being appended to
	first  uint64   // first index of f
	size   int64    // bytes of records in f
	alloc  int64    // f's size on disk: records, then zeros
	last   uint64   // index of the newest record
	oldest []uint64 // first indexes of the closed segments, ascending
}

func segName(first uint64) string { return fmt.Sprintf("%016x.log", first) }

// openLog opens the log in dir, creating it if needed, and returns the
// records after applied: the batches the base does not hold yet. A log
// that ends before applied belongs to another copy of the database (a
// snapshot restored over this data dir, or a database copied in): it is
// set aside, and a new log begins at applied.
func openLog(log *slog.Logger, dir string, applied uint64) (*fileLog, []record, error) {
	l := &fileLog{dir: dir, log: log}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("memtail: create log dir: %w", err)
	}
	firsts, err := l.segments()
	if err != nil {
		return nil, nil, err
	}
	var recs []record
	for i, first := range firsts {
		lastSeg := i == len(firsts)-1
		rs, size, err := readSegment(filepath.Join(dir, segName(first)), lastSeg)
		if err != nil {
			return nil, nil, err
		}
		if lastSeg && size.torn {
			log.Warn("the log ends in a partly written record (a crash during a write): cutting it off; that write was never acknowledged",
				"segment", segName(first), "offset", size.records)
		}
		for _, r := range rs {
			if r.index <= applied {
				continue
			}
			want := applied + 1
			if len(recs) > 0 {
				want = recs[len(recs)-1].index + 1
			}
			if r.index != want {
				return nil, nil, fmt.Errorf("memtail: the log in %s holds batch %d where %d was due: the batches between are in neither the log nor the database", dir, r.index, want)
			}
			recs = append(recs, r)
		}
		// A segment begins after the batch before it, records or not.
		l.last = max(l.last, first-1)
		if len(rs) > 0 {
			l.last = max(l.last, rs[len(rs)-1].index)
		}
		if lastSeg {
			// Appends go on after the last complete record, over a torn
			// one if there was one.
			if err := l.reopen(first, size.records); err != nil {
				return nil, nil, err
			}
		} else {
			l.oldest = append(l.oldest, first)
		}
	}
	if len(firsts) > 0 && l.last < applied {
		if err := l.close(); err != nil {
			return nil, nil, err
		}
		aside := fmt.Sprintf("%s.stale-%d", dir, os.Getpid())
		log.Warn("the log ends before the database's applied index (the database was restored or copied in): setting the log aside and starting a new one",
			"dir", dir, "log_last_index", l.last, "applied_index", applied, "set_aside", aside)
		if err := os.Rename(dir, aside); err != nil {
			return nil, nil, fmt.Errorf("memtail: set aside a stale log: %w", err)
		}
		return openLog(log, dir, applied)
	}
	if l.f == nil {
		l.last = applied
		if err := l.startSegment(applied + 1); err != nil {
			return nil, nil, err
		}
	}
	return l, recs, nil
}

// segments lists the first indexes of the segment files, ascending.
func (l *fileLog) segments() ([]uint64, error) {
	names, err := filepath.Glob(filepath.Join(l.dir, "*.log"))
	if err != nil {
		return nil, fmt.Errorf("memtail: list log segments: %w", err)
	}
	var firsts []uint64
	for _, n := range names {
		first, err := strconv.ParseUint(strings.TrimSuffix(filepath.Base(n), ".log"), 16, 64)
		if err != nil {
			return nil, fmt.Errorf("memtail: log segment %s: unexpected name", n)
		}
		firsts = append(firsts, first)
	}
	slices.Sort(firsts)
	return firsts, nil
}

// record is one batch read back from the log.
type record struct {
	index   uint64
	payload []byte
}

type segSize struct {
	records int64 // bytes of complete records
	torn    bool  // a partial record follows them
}

// readSegment reads a segment's records. Damage after the last complete
// record of the newest segment, where only zeros follow, is a torn
// write: it was never synced, so never acknowledged, and the log is cut
// there. Any other damage stops the start: replaying around it would
// lose or invent writes.
func readSegment(path string, newest bool) ([]record, segSize, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, segSize{}, fmt.Errorf("memtail: read log segment: %w", err)
	}
	var recs []record
	off := int64(0)
	for {
		rest := data[off:]
		if len(rest) < logHeader {
			if allZero(rest) {
				return recs, segSize{records: off}, nil
			}
			return tornOr(recs, off, newest, path, nil)
		}
		n := int64(binary.LittleEndian.Uint32(rest))
		if n == 0 {
			// The end of the data, as in etcd's WAL: what a torn write
			// may have left after it is zeroed before appending.
			return recs, segSize{records: off}, nil
		}
		if n < 8 || int64(len(rest)) < 8+n {
			return tornOr(recs, off, newest, path, nil)
		}
		body := rest[8 : 8+n]
		if crc32.Checksum(body, logCRC) != binary.LittleEndian.Uint32(rest[4:]) {
			return tornOr(recs, off, newest, path, rest[8+n:])
		}
		recs = append(recs, record{index: binary.LittleEndian.Uint64(body), payload: body[8:]})
		off += 8 + n
	}
}

// tornOr decides whether damage at off is a torn last write (only zeros
// after it, in the newest segment) or corruption.
func tornOr(recs []record, off int64, newest bool, path string, after []byte) ([]record, segSize, error) {
	if newest && allZero(after) {
		return recs, segSize{records: off, torn: true}, nil
	}
	return nil, segSize{}, fmt.Errorf("memtail: log segment %s is damaged at offset %d, before its end: not replaying it", path, off)
}

// allZero reports whether b holds only zeros.
func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// reopen continues appending to segment first after its records, zeroing
// whatever a torn write left behind them.
func (l *fileLog) reopen(first uint64, records int64) error {
	f, err := os.OpenFile(filepath.Join(l.dir, segName(first)), os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("memtail: open log segment: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("memtail: open log segment: %w", err)
	}
	if err := zeroFrom(f, records, st.Size()); err != nil {
		f.Close()
		return err
	}
	l.f, l.first, l.size, l.alloc = f, first, records, st.Size()
	return nil
}

// zeroFrom writes zeros over [from, to) and syncs them.
func zeroFrom(f *os.File, from, to int64) error {
	if from >= to {
		return nil
	}
	zeros := make([]byte, min(to-from, 1<<20))
	for off := from; off < to; off += int64(len(zeros)) {
		n := min(int64(len(zeros)), to-off)
		if _, err := f.WriteAt(zeros[:n], off); err != nil {
			return fmt.Errorf("memtail: cut the log's torn tail: %w", err)
		}
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("memtail: cut the log's torn tail: %w", err)
	}
	return nil
}

// startSegment creates the segment whose first batch is first and makes
// the directory entry durable.
func (l *fileLog) startSegment(first uint64) error {
	f, err := os.OpenFile(filepath.Join(l.dir, segName(first)), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("memtail: create log segment: %w", err)
	}
	if err := syncDir(l.dir); err != nil {
		f.Close()
		return err
	}
	if l.f != nil {
		l.oldest = append(l.oldest, l.first)
		if err := l.f.Close(); err != nil {
			f.Close()
			return fmt.Errorf("memtail: close log segment: %w", err)
		}
	}
	l.f, l.first, l.size, l.alloc = f, first, 0, 0
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("memtail: sync log dir: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("memtail: sync log dir: %w", err)
	}
	return nil
}

// errLogSpace marks an append that failed before writing anything: the
// log is as it was and takes appends again once there is room.
var errLogSpace = errors.New("no room to grow the log")

// append writes one batch's record and syncs it. An error wrapping
// errLogSpace left the log unchanged; any other may have left part of a
// record behind, and the log must not be appended to again.
func (l *fileLog) append(index uint64, payload []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.size >= logSegBytes {
		if err := l.startSegment(index); err != nil {
			return fmt.Errorf("%w: %w", errLogSpace, err)
		}
	}
	n := int64(logHeader + len(payload))
	if l.size+n > l.alloc {
		grow := max(logChunk, n)
		if err := fallocate(l.f, l.alloc, grow); err != nil {
			return fmt.Errorf("%w: %w", errLogSpace, err)
		}
		l.alloc += grow
	}
	rec := make([]byte, n)
	binary.LittleEndian.PutUint32(rec, uint32(8+len(payload)))
	binary.LittleEndian.PutUint64(rec[8:], index)
	copy(rec[16:], payload)
	binary.LittleEndian.PutUint32(rec[4:], crc32.Checksum(rec[8:], logCRC))
	if _, err := l.f.WriteAt(rec, l.size); err != nil {
		return fmt.Errorf("memtail: append batch %d to the log: %w", index, err)
	}
	if err := fdatasync(l.f); err != nil {
		return fmt.Errorf("memtail: sync batch %d in the log: %w", index, err)
	}
	l.size += n
	l.last = index
	return nil
}

// fallocate extends f by n bytes of allocated zeros at off, so that the
// writes into them need no new blocks and no size change.
func fallocate(f *os.File, off, n int64) error {
	for {
		err := syscall.Fallocate(int(f.Fd()), 0, off, n)
		if err == syscall.EINTR {
			continue
		}
		if err == syscall.ENOTSUP || err == syscall.EOPNOTSUPP {
			// A file system without fallocate: zeros the slow way.
			return zeroFrom(f, off, off+n)
		}
		if err != nil {
			return fmt.Errorf("preallocate the log: %w", err)
		}
		return nil
	}
}

func fdatasync(f *os.File) error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if err != syscall.EINTR {
			return err
		}
	}
}

// release deletes the closed segments that hold only batches up to index,
// which the base holds durably.
func (l *fileLog) release(index uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for len(l.oldest) > 0 {
		// A closed segment ends where the next begins.
		next := l.first
		if len(l.oldest) > 1 {
			next = l.oldest[1]
		}
		if next-1 > index {
			return nil
		}
		if err := os.Remove(filepath.Join(l.dir, segName(l.oldest[0]))); err != nil {
			return fmt.Errorf("memtail: remove a released log segment: %w", err)
		}
		l.oldest = l.oldest[1:]
	}
	return nil
}

func (l *fileLog) close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
