package main

// Snapshots taken of a real etcd (`etcdctl snapshot save`, the Maintenance
// Snapshot RPC) are etcd's bbolt database file, not a kite database. kite
// reads them itself, so that `kite snapshot restore`, `kite snapshot status`
// and `kite copy --from-snapshot` take them as they take kite's own, and
// moving from etcd needs only the file an etcd operator already has.
//
// What etcd keeps in that file, and what of it matters here (etcd's
// storage/schema, storage/mvcc and lease packages):
//
//   - bucket "key" is the whole MVCC history that survived compaction. Each
//     bbolt key is a revision: 8 bytes big-endian main revision, '_', 8 bytes
//     big-endian sub-revision (the position of the change inside its
//     revision), and an 18th byte 't' on a tombstone. bbolt keeps keys in
//     byte order, so the bucket is already in (main, sub) order, the order
//     a kite log is written in. Each value is a marshaled mvccpb.KeyValue,
//     complete (create and mod revision, version, value, lease) for a put,
//     only the key for a tombstone.
//   - bucket "lease" maps an 8-byte big-endian lease ID to a marshaled
//     leasepb.Lease: the ID and the granted TTL. Remaining time is not
//     durable in etcd either: a restarted etcd gives every lease its TTL.
//   - bucket "meta" holds finishedCompactRev and scheduledCompactRev (a
//     revision in the key encoding above; scheduled runs ahead of finished
//     while a compaction is under way, and a restarted etcd finishes it),
//     and raft's consistent_index, term and confState, which belong to the
//     old cluster and are not carried over (etcdutl snapshot restore
//     rewrites them too).
//   - etcd has no stored current revision: on start it takes the highest
//     main revision in "key", but at least the compacted revisions (a
//     compaction may have removed every row up to the newest) and at least 1.
//
// Everything else (members, alarms, auth users and roles) is not carried
// over: membership is the new cluster's, alarms name the old members, and
// kite does not implement auth (a snapshot with auth enabled is converted
// with a warning: every client of the kite gets full access).
//
// The conversion writes every row through kite's own mvcc.WriteTx into a
// temporary SQLite database, in one transaction, with the same revisions
// and sub-revisions, then the leases and the current and compacted
// revisions: reads at every revision from the compacted one on answer as
// etcd's, and below it ErrCompacted. The resulting database is what every
// restore path (single node, a new raftsql cluster, kite copy) already takes.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/server/v3/lease/leasepb"
	"google.golang.org/protobuf/proto"

	"github.com/kite-db/kite/pkg/drivers/sqlite"
	"github.com/kite-db/kite/pkg/mvcc"
)

const (
	// sqliteHeader begins every SQLite database file, so a kite snapshot.
	sqliteHeader = "SQLite format 3\x00"
	// boltMagic follows the 16-byte page header of a bbolt file's first
	// meta page, in the byte order of the machine that wrote it.
	boltMagic       uint32 = 0xED0CDAED
	boltMagicOffset        = 16

	etcdKeyBucket   = "key"
	etcdLeaseBucket = "lease"
	etcdMetaBucket  = "meta"
	etcdAuthBucket  = "auth"

	etcdRevLen        = 17 // main, '_', sub
	etcdTombstoneMark = 't'
)

// errUnknownSnapshot is returned for a file that is neither kind.
var errUnknownSnapshot = errors.New("not a snapshot: neither a kite database (SQLite) nor an etcd database (bbolt)")

type snapshotFormat int

const (
	formatUnknown snapshotFormat = iota
	formatKite
	formatEtcd
)

// detectSnapshot tells a snapshot's format from its first bytes (the
// checksum trailer already removed).
func detectSnapshot(data []byte) snapshotFormat {
	switch {
	case bytes.HasPrefix(data, []byte(sqliteHeader)):
		return formatKite
	case len(data) >= boltMagicOffset+4 &&
		(binary.LittleEndian.Uint32(data[boltMagicOffset:]) == boltMagic ||
			binary.BigEndian.Uint32(data[boltMagicOffset:]) == boltMagic):
		return formatEtcd
	}
	return formatUnknown
}

// snapshotDatabase returns the kite database a snapshot's contents hold:
// a kite snapshot as it is, an etcd snapshot converted.
func snapshotDatabase(ctx context.Context, log *slog.Logger, data []byte) ([]byte, error) {
	switch detectSnapshot(data) {
	case formatKite:
		return data, nil
	case formatEtcd:
		return convertEtcdSnapshot(ctx, log, data)
	}
	return nil, errUnknownSnapshot
}

// convertEtcdSnapshot returns a kite database holding the key space of the
// etcd database data.
func convertEtcdSnapshot(ctx context.Context, log *slog.Logger, data []byte) (_ []byte, err error) {
	snap, err := openEtcdSnapshot(data)
	if err != nil {
		return nil, err
	}
	defer snap.Close()
	// The kite database is temporary (its bytes are what is returned), so
	// its commit need not be synced.
	b, err := sqlite.Open(ctx, filepath.Join(snap.dir, "kite.db"), sqlite.Options{NoCommitSync: true})
	if err != nil {
		return nil, fmt.Errorf("create kite database: %w", err)
	}
	defer func() { err = errors.Join(err, b.Close()) }()
	conv, err := snap.convert(ctx, log, b)
	if err != nil {
		return nil, err
	}
	log.Info("converted an etcd snapshot", "revision", conv.current, "compacted", conv.compacted,
		"rows", conv.rows, "keys", conv.keys, "leases", conv.leases)
	// A single file with the log and the revisions in it, in the form the
	// sqlite driver opens as a data file (its own snapshot).
	rc, _, err := b.Snapshot(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the converted database: %w", err)
	}
	defer rc.Close()
	out, err := io.ReadAll(rc)
	if err != nil {
		return nil, fmt.Errorf("read the converted database: %w", err)
	}
	return out, nil
}

// etcdSnapshot is an etcd database opened read-only.
type etcdSnapshot struct {
	db  *bolt.DB
	dir string // holds the copy bbolt opened; removed by Close
}

// openEtcdSnapshot opens a copy of data: bbolt maps a whole file that must
// be exactly the database (the snapshot file may carry a checksum
// trailer), and the user's file stays untouched.
func openEtcdSnapshot(data []byte) (_ *etcdSnapshot, err error) {
	dir, err := os.MkdirTemp("", "kite-etcd-snapshot-")
	if err != nil {
		return nil, fmt.Errorf("temporary directory: %w", err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	path := filepath.Join(dir, "etcd.db")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return nil, fmt.Errorf("copy the etcd snapshot: %w", err)
	}
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true, Timeout: 10 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("open etcd snapshot: %w", err)
	}
	return &etcdSnapshot{db: db, dir: dir}, nil
}

func (s *etcdSnapshot) Close() error {
	return errors.Join(s.db.Close(), os.RemoveAll(s.dir))
}

// parseEtcdRevision decodes a bbolt key of bucket "key".
func parseEtcdRevision(k []byte) (main, sub int64, tombstone bool, err error) {
	switch {
	case len(k) == etcdRevLen+1 && k[etcdRevLen] == etcdTombstoneMark:
		tombstone = true
	case len(k) != etcdRevLen:
		return 0, 0, false, fmt.Errorf("revision %x: want %d bytes, or %d ending in 't'", k, etcdRevLen, etcdRevLen+1)
	}
	if k[8] != '_' {
		return 0, 0, false, fmt.Errorf("revision %x: no '_' separator", k)
	}
	main, sub = int64(binary.BigEndian.Uint64(k[:8])), int64(binary.BigEndian.Uint64(k[9:17]))
	if main < 1 || sub < 0 {
		return 0, 0, false, fmt.Errorf("revision %x: main %d, sub %d out of range", k, main, sub)
	}
	return main, sub, tombstone, nil
}

// revisions returns the revisions a restarted etcd would serve this
// database at (etcd's kvstore restore): the compacted revision is the
// scheduled one when a compaction was under way, as etcd finishes it.
func (s *etcdSnapshot) revisions() (current, compacted int64, err error) {
	var newest, finished, scheduled int64
	err = s.db.View(func(tx *bolt.Tx) error {
		keys := tx.Bucket([]byte(etcdKeyBucket))
		if keys == nil {
			return fmt.Errorf("no %q bucket: not a database of etcd v3", etcdKeyBucket)
		}
		if k, _ := keys.Cursor().Last(); k != nil {
			main, _, _, err := parseEtcdRevision(k)
			if err != nil {
				return fmt.Errorf("newest row: %w", err)
			}
			newest = main
		}
		meta := tx.Bucket([]byte(etcdMetaBucket))
		if meta == nil {
			return nil
		}
		for name, rev := range map[string]*int64{"finishedCompactRev": &finished, "scheduledCompactRev": &scheduled} {
			if v := meta.Get([]byte(name)); v != nil {
				main, _, _, err := parseEtcdRevision(v)
				if err != nil {
					return fmt.Errorf("meta %s: %w", name, err)
				}
				*rev = main
			}
		}
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	compacted = max(finished, scheduled)
	return max(newest, compacted, 1), compacted, nil
}

// eachRaw calls fn with every bbolt key and value of bucket "key", in
// revision order. They point into bbolt's memory map, valid during fn.
func (s *etcdSnapshot) eachRaw(fn func(k, v []byte) error) error {
	return s.db.View(func(tx *bolt.Tx) error {
		keys := tx.Bucket([]byte(etcdKeyBucket))
		if keys == nil {
			return fmt.Errorf("no %q bucket: not a database of etcd v3", etcdKeyBucket)
		}
		return keys.ForEach(fn)
	})
}

// etcdRow is one decoded row of bucket "key".
type etcdRow struct {
	main, sub int64
	tombstone bool
	kv        *mvccpb.KeyValue
}

// eachRow calls fn with every row of bucket "key", decoded and checked,
// in revision order.
func (s *etcdSnapshot) eachRow(fn func(etcdRow) error) error {
	return s.eachRaw(func(k, v []byte) error {
		var r etcdRow
		var err error
		if r.main, r.sub, r.tombstone, err = parseEtcdRevision(k); err != nil {
			return err
		}
		r.kv = &mvccpb.KeyValue{}
		if err := proto.Unmarshal(v, r.kv); err != nil {
			return fmt.Errorf("row %d/%d: %w", r.main, r.sub, err)
		}
		if len(r.kv.Key) == 0 {
			return fmt.Errorf("row %d/%d: empty key", r.main, r.sub)
		}
		if r.tombstone {
			// A tombstone's value is the key alone; a DELETE event
			// carries the revision it happened at.
			r.kv = &mvccpb.KeyValue{Key: r.kv.Key, ModRevision: r.main}
		} else if kv := r.kv; kv.ModRevision != r.main || kv.CreateRevision < 1 || kv.CreateRevision > r.main || kv.Version < 1 {
			return fmt.Errorf("row %d/%d of %q: create %d, mod %d, version %d do not fit its revision",
				r.main, r.sub, kv.Key, kv.CreateRevision, kv.ModRevision, kv.Version)
		}
		return fn(r)
	})
}

// leases returns the leases with their granted TTLs, in bucket (ID) order.
func (s *etcdSnapshot) leases() ([]mvcc.Lease, error) {
	var out []mvcc.Lease
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(etcdLeaseBucket))
		if b == nil {
			return nil // no lease was ever granted
		}
		return b.ForEach(func(k, v []byte) error {
			var l leasepb.Lease
			if err := proto.Unmarshal(v, &l); err != nil {
				return fmt.Errorf("lease %x: %w", k, err)
			}
			if len(k) != 8 || int64(binary.BigEndian.Uint64(k)) != l.ID {
				return fmt.Errorf("lease %x holds lease ID %x", k, l.ID)
			}
			out = append(out, mvcc.Lease{ID: l.ID, TTL: l.TTL})
			return nil
		})
	})
	return out, err
}

// authEnabled reports whether etcd's authentication was on.
func (s *etcdSnapshot) authEnabled() bool {
	on := false
	_ = s.db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket([]byte(etcdAuthBucket)); b != nil {
			v := b.Get([]byte("authEnabled"))
			on = len(v) == 1 && v[0] == 1
		}
		return nil
	})
	return on
}

// storageVersion is the storage version etcd recorded ("" before 3.6).
func (s *etcdSnapshot) storageVersion() string {
	var v string
	_ = s.db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket([]byte(etcdMetaBucket)); b != nil {
			v = string(b.Get([]byte("storageVersion")))
		}
		return nil
	})
	return v
}

// etcdConversion is what a conversion wrote.
type etcdConversion struct {
	current, compacted int64
	rows               int64 // rows of the log
	keys               int64 // keys alive at current
	leases             int
}

// convert writes the snapshot's key space into dst, which must be empty,
// in one write transaction.
func (s *etcdSnapshot) convert(ctx context.Context, log *slog.Logger, dst mvcc.Backend) (etcdConversion, error) {
	var c etcdConversion
	var err error
	if c.current, c.compacted, err = s.revisions(); err != nil {
		return c, err
	}
	leases, err := s.leases()
	if err != nil {
		return c, err
	}
	if s.authEnabled() {
		log.Warn("the etcd snapshot has authentication enabled; kite does not implement auth: its users and roles are not restored and every client gets full access")
	}
	tx, err := dst.BeginWrite(ctx)
	if err != nil {
		return c, fmt.Errorf("kite database: begin write: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			_ = tx.Rollback()
		}
	}()
	// The lease of each key alive at the end: etcd attaches exactly those.
	live := make(map[string]int64)
	err = s.eachRow(func(r etcdRow) error {
		c.rows++
		if r.tombstone {
			delete(live, string(r.kv.Key))
			return tx.Delete(ctx, r.kv.Key, r.main, r.sub)
		}
		live[string(r.kv.Key)] = r.kv.Lease
		return tx.Put(ctx, r.kv, r.sub)
	})
	if err != nil {
		return c, fmt.Errorf("convert key history: %w", err)
	}
	granted := make(map[int64]bool, len(leases))
	for _, l := range leases {
		if err := tx.PutLease(ctx, l); err != nil {
			return c, fmt.Errorf("lease %x: %w", l.ID, err)
		}
		granted[l.ID] = true
	}
	orphans := 0
	for _, id := range live {
		if id != 0 && !granted[id] {
			orphans++
		}
	}
	if orphans > 0 {
		// etcd keeps such keys, and their lease field, without a lease to
		// expire them; so does the conversion.
		log.Warn("keys of the etcd snapshot name a lease it does not hold", "keys", orphans)
	}
	if err := tx.SetRevisions(ctx, c.current, c.compacted); err != nil {
		return c, fmt.Errorf("set revisions: %w", err)
	}
	// Rows that a compaction under way (scheduled ahead of finished) would
	// have removed go now, as a restarted etcd would remove them; a
	// finished compaction left none. Bounded steps as kite's compactor.
	const step = 10000
	for from := int64(0); from <= c.compacted; from += step {
		if _, err := tx.CompactBatch(ctx, c.compacted, from, min(from+step-1, c.compacted)); err != nil {
			return c, fmt.Errorf("compact to %d: %w", c.compacted, err)
		}
	}
	// A cheap check, before anything is committed, that the driver took
	// the rows as meant.
	cur, comp, err := tx.Revisions(ctx)
	if err != nil {
		return c, fmt.Errorf("read revisions back: %w", err)
	}
	n, err := tx.Count(ctx, []byte{0}, []byte{0}, c.current)
	if err != nil {
		return c, fmt.Errorf("count keys back: %w", err)
	}
	if cur != c.current || comp != c.compacted || n != int64(len(live)) {
		return c, fmt.Errorf("converted database at revision %d compacted %d with %d keys; the snapshot has revision %d compacted %d with %d keys",
			cur, comp, n, c.current, c.compacted, len(live))
	}
	if err := tx.Commit(); err != nil {
		return c, fmt.Errorf("commit: %w", err)
	}
	committed = true
	c.keys, c.leases = n, len(leases)
	return c, nil
}

// hashKV is etcd's HashKV of the snapshot at rev (compacted <= rev <=
// current), the value `etcdctl endpoint hashkv --rev` gave on the server
// it came from, and the number of keys alive at rev. etcd hashes, with
// CRC-32C, the bucket name and then the raw bbolt key and value of every
// row up to rev, leaving out rows at or below the compacted revision that
// are not the newest version of a key alive at rev (a compaction at rev
// would remove them; etcd finds them in its in-memory index, here the
// history itself tells) and a tombstone at exactly the compacted revision
// (etcd before 3.5.16 removed those). One answer of etcd is out of reach:
// HashKV at exactly a compaction's revision, asked of the etcd that
// compacted, returns a hash it took while compacting, over history no
// snapshot holds; restarted on the same database, etcd answers as here.
func (s *etcdSnapshot) hashKV(compacted, rev int64) (hash uint32, keys int64, err error) {
	type revision struct{ main, sub int64 }
	type newest struct {
		revision
		tombstone bool
	}
	latest := make(map[string]newest)
	err = s.eachRow(func(r etcdRow) error {
		if r.main <= rev {
			latest[string(r.kv.Key)] = newest{revision{r.main, r.sub}, r.tombstone}
		}
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	keep := make(map[revision]bool, len(latest))
	for _, n := range latest {
		if !n.tombstone {
			keep[n.revision] = true
		}
	}
	h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	h.Write([]byte(etcdKeyBucket))
	err = s.eachRaw(func(k, v []byte) error {
		main, sub, tombstone, err := parseEtcdRevision(k)
		if err != nil {
			return err
		}
		switch {
		case main > rev:
			return nil
		// etcd filters only with a non-empty keep set.
		case main <= compacted && len(keep) > 0 && !keep[revision{main, sub}]:
			return nil
		case main == compacted && tombstone:
			return nil
		}
		h.Write(k)
		h.Write(v)
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	return h.Sum32(), int64(len(keep)), nil
}
