package test

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// A power loss can leave the last record of a log partly written. These
// tests SIGKILL kite during writes, then damage the tail of a log the way
// a torn write does, and restart: kite must come back at the last complete
// record, never replay the garbage, and lose no acknowledged write.

// TestTornTailSQLite: in sqlite mode every acknowledged commit is synced
// (synchronous=FULL), so a torn write can only be a transaction that was
// never acknowledged: frames appended after the last synced commit, the
// last one cut short, which SQLite's frame checksums make it ignore. With
// --experimental-sqlite-log-commit a write is acknowledged once kite's
// own log (kite.db.log) has synced it and SQLite is committed unsynced
// behind it: a torn write is then the log's last record, never synced so
// never acknowledged (cut at start), or SQLite's last commit, lost as a
// power loss loses what was never synced (the log replays it from the
// applied index SQLite holds). Either way nothing acknowledged is lost.
func TestTornTailSQLite(t *testing.T) {
	if againstEtcd {
		t.Skip("the damage is to kite's SQLite file and log")
	}
	const logCommit = "--experimental-sqlite-log-commit"
	for _, tc := range []struct {
		name string
		// flags start kite; restart, if set, restarts it (else flags).
		flags, restart []string
		// tear damages the tail, or says there was nothing to tear.
		tear func(t *testing.T, dataDir string) bool
	}{
		{name: "SQLite WAL append", tear: func(t *testing.T, dataDir string) bool {
			return tearSQLiteWALAppend(t, filepath.Join(dataDir, "kite.db-wal"))
		}},
		{name: "kite log", flags: []string{logCommit}, tear: func(t *testing.T, dataDir string) bool {
			tearKiteLog(t, filepath.Join(dataDir, "kite.db.log"))
			return true
		}},
		{name: "SQLite WAL commit behind kite log", flags: []string{logCommit}, tear: func(t *testing.T, dataDir string) bool {
			return tearSQLiteWALCommit(t, filepath.Join(dataDir, "kite.db-wal"))
		}},
		// A data dir that ran with the log, restarted without it: the log
		// is applied first, then removed.
		{name: "kite log then without it", flags: []string{logCommit}, restart: []string{}, tear: func(t *testing.T, dataDir string) bool {
			return tearSQLiteWALCommit(t, filepath.Join(dataDir, "kite.db-wal"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			k := startKiteIn(t, dir, tc.flags...)
			ctx := testCtx(t, 3*time.Minute)
			acks := killUntilTorn(ctx, t, []*kiteProcess{k}, "/torn/sqlite/", k, k.Restart,
				func() bool { return tc.tear(t, dir) })
			if tc.restart != nil {
				k.flags = slices.DeleteFunc(slices.Clone(k.flags), func(f string) bool { return f == logCommit })
			}
			k.Restart()
			checkAcks(ctx, t, k, acks)
			if tc.restart != nil {
				if _, err := os.Stat(filepath.Join(dir, "kite.db.log")); !os.IsNotExist(err) {
					t.Errorf("kite.db.log still there after a start without %s: %v", logCommit, err)
				}
			}
		})
	}
}

// tearKiteLog appends a half-written record to the newest segment of
// kite's log: a record is a 4-byte length, a 4-byte CRC and the body
// (pkg/mvcc/memtail/log.go); a segment is preallocated with zeros, and a
// zero length ends its data. The torn record claims 2 KiB: its first
// sector is written, the rest still zeros, as when power fails between
// sector writes.
func tearKiteLog(t *testing.T, dir string) {
	t.Helper()
	segs, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil || len(segs) == 0 {
		t.Fatalf("kite log segments in %s: %v, %v", dir, segs, err)
	}
	slices.Sort(segs)
	path := segs[len(segs)-1]
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	off := 0
	for off+8 <= len(data) {
		n := int(binary.LittleEndian.Uint32(data[off:]))
		if n == 0 {
			break
		}
		off += 8 + n
	}
	const body, sector = 2048, 512
	if off+8+body > len(data) {
		data = append(data, make([]byte, off+8+body-len(data))...)
	}
	binary.LittleEndian.PutUint32(data[off:], body)
	binary.LittleEndian.PutUint32(data[off+4:], 0xdeadbeef)
	for i := off + 8; i < off+sector; i++ {
		data[i] = byte(i*7 + 1)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Logf("kite log %s torn after its last record at offset %d", filepath.Base(path), off)
}

// TestTornTailRaftSQL: a raftsql follower's two logs torn after a SIGKILL.
// Its raft WAL ends in a half-written record (etcd's WAL repair cuts it at
// start; the leader sends the entry again). Its SQLite file, committed
// unsynced behind the raft WAL, loses its last committed transaction, as
// a power loss loses what was never synced: the member replays the
// entries after its applied index from the raft WAL. Either way it
// converges to the others' HashKV and has every acknowledged write.
// Applied behind the WAL (the default) the members apply into memory and
// SQLite behind it: the SIGKILL loses the entries in memory as well, and
// the same replay brings them back; with --raft-apply-behind=false every
// apply batch is a SQLite commit.
func TestTornTailRaftSQL(t *testing.T) {
	if againstEtcd {
		t.Skip("the damage is to kite's raft WAL and SQLite files")
	}
	tearRaft := func(t *testing.T, dataDir string) bool {
		tearRaftWAL(t, filepath.Join(dataDir, "member", "wal"))
		return true
	}
	tearSQLite := func(t *testing.T, dataDir string) bool {
		return tearSQLiteWALCommit(t, filepath.Join(dataDir, "kite.db-wal"))
	}
	for _, tc := range []struct {
		name  string
		flags []string
		tear  func(t *testing.T, dataDir string) bool
	}{
		{"raft WAL, apply commits SQLite", []string{"--raft-apply-behind=false"}, tearRaft},
		{"SQLite WAL, apply commits SQLite", []string{"--raft-apply-behind=false"}, tearSQLite},
		{"raft WAL, applied behind", nil, tearRaft},
		{"SQLite WAL, applied behind", nil, tearSQLite},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := startClusterWith(t, 3, tc.flags...)
			ctx := testCtx(t, 3*time.Minute)
			l := c.leaderIndex(t)
			f := c.members[c.others(l)[0]]
			acks := killUntilTorn(ctx, t, c.procs(l), fmt.Sprintf("/torn/%s/", tc.name), f.kiteProcess, f.Restart,
				func() bool { return tc.tear(t, f.dataDir) })
			f.Restart()
			last := mustRev(t, c.members[l].kiteProcess)
			waitApplied(t, c, last)
			sameHashKV(t, ctx, c, last)
			checkAcks(ctx, t, f.kiteProcess, acks)
		})
	}
}

// killUntilTorn writes through ks and kills victim (writeThenKill) until
// tear finds something to tear, restarting victim between rounds, and
// returns every round's acknowledged writes. A kill can land while SQLite
// writes the first transaction of a WAL the checkpointer just reset: the
// WAL then holds no commit of its generation, a legal state with nothing
// to tear, so the round is tried again (at most 5).
func killUntilTorn(ctx context.Context, t *testing.T, ks []*kiteProcess, prefix string, victim *kiteProcess, restart func(), tear func() bool) []ack {
	t.Helper()
	var acks []ack
	for round := 1; ; round++ {
		acks = append(acks, writeThenKill(ctx, t, ks, fmt.Sprintf("%sr%d/", prefix, round), victim)...)
		if tear() {
			return acks
		}
		if round == 5 {
			t.Fatalf("%d kills left nothing to tear", round)
		}
		restart()
	}
}

// writeThenKill writes through ks until victim has been SIGKILLed in the
// middle of the writes, and returns what was acknowledged.
func writeThenKill(ctx context.Context, t *testing.T, ks []*kiteProcess, prefix string, victim *kiteProcess) []ack {
	t.Helper()
	wr := startWriters(ctx, t, ks, func(ctx context.Context, c *clientv3.Client, i, n int) (ack, error) {
		key, value := fmt.Sprintf("%ss%d/k%05d", prefix, i, n), fmt.Sprintf("v%d-%d", i, n)
		resp, err := c.Put(ctx, key, value)
		if err != nil {
			return ack{}, err
		}
		return ack{key, value, resp.Header.Revision}, nil
	})
	time.Sleep(1500 * time.Millisecond)
	victim.Kill()
	time.Sleep(300 * time.Millisecond)
	acks, _ := wr.stop()
	if len(acks) == 0 {
		t.Fatal("no write was acknowledged")
	}
	return acks
}

// checkAcks reads every acknowledged write back from k at its revision.
func checkAcks(ctx context.Context, t *testing.T, k *kiteProcess, acks []ack) {
	t.Helper()
	for _, a := range acks {
		resp, err := k.Client.Get(ctx, a.key, clientv3.WithSerializable())
		if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != a.value || resp.Kvs[0].ModRevision != a.rev {
			t.Fatalf("acknowledged %s=%s at revision %d, after the torn tail: %v, %v", a.key, a.value, a.rev, resp, err)
		}
	}
	t.Logf("%d acknowledged writes all present", len(acks))
}

// SQLite's WAL file: a 32-byte header (page size at 8, salts at 16 and 20,
// big-endian), then frames of a 24-byte header (page number, database size
// after the commit for the last frame of a transaction, else 0, the two
// salts, a checksum) and one page.
const (
	sqliteWALHeader   = 32
	sqliteFrameHeader = 24
)

type sqliteWAL struct {
	data     []byte
	pageSize int
	// commits are the offsets of the valid commit frames, in order.
	commits []int
	end     int // the end of the frames that carry the header's salts
}

// readSQLiteWAL returns nil if the WAL holds no commit of its generation
// (a checkpoint may also have truncated it).
func readSQLiteWAL(t *testing.T, path string) *sqliteWAL {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read SQLite WAL: %v", err)
	}
	if len(data) < sqliteWALHeader {
		t.Logf("SQLite WAL %s has %d bytes: nothing to tear", path, len(data))
		return nil
	}
	w := &sqliteWAL{data: data, pageSize: int(binary.BigEndian.Uint32(data[8:]))}
	salts := data[16:24]
	off := sqliteWALHeader
	for ; off+sqliteFrameHeader+w.pageSize <= len(data); off += sqliteFrameHeader + w.pageSize {
		if !slices.Equal(data[off+8:off+16], salts) {
			break // a frame of an earlier generation of the WAL
		}
		if binary.BigEndian.Uint32(data[off+4:]) != 0 {
			w.commits = append(w.commits, off)
		}
	}
	w.end = off
	if len(w.commits) == 0 {
		t.Logf("SQLite WAL %s holds no commit of its generation", path)
		return nil
	}
	return w
}

// tearSQLiteWALAppend writes a transaction after the last commit that
// never finished: two frames with the WAL's salts and no valid checksum,
// the second cut in the middle of its page. It returns false if the WAL
// held no commit to write after.
func tearSQLiteWALAppend(t *testing.T, path string) bool {
	t.Helper()
	w := readSQLiteWAL(t, path)
	if w == nil {
		return false
	}
	frame := make([]byte, sqliteFrameHeader+w.pageSize)
	copy(frame[8:16], w.data[16:24])
	for i := sqliteFrameHeader; i < len(frame); i++ {
		frame[i] = byte(i*7 + 1)
	}
	binary.BigEndian.PutUint32(frame[0:], 1)
	torn := append(slices.Clone(frame), frame[:sqliteFrameHeader+w.pageSize/2]...)
	binary.BigEndian.PutUint32(torn[len(frame)+4:], 1) // the cut frame says it commits
	out := append(w.data[:w.end:w.end], torn...)
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
	os.Remove(path[:len(path)-len("-wal")] + "-shm") // rebuilt from the WAL
	return true
}

// tearSQLiteWALCommit cuts the WAL in the middle of the page of its last
// commit frame: that transaction, committed but never synced, is lost as a
// power loss loses it. It returns false if the WAL held no commit.
func tearSQLiteWALCommit(t *testing.T, path string) bool {
	t.Helper()
	w := readSQLiteWAL(t, path)
	if w == nil {
		return false
	}
	last := w.commits[len(w.commits)-1]
	if err := os.Truncate(path, int64(last+sqliteFrameHeader+w.pageSize/2)); err != nil {
		t.Fatal(err)
	}
	os.Remove(path[:len(path)-len("-wal")] + "-shm")
	t.Logf("SQLite WAL cut inside its commit frame %d of %d", len(w.commits), len(w.commits))
	return true
}

// tearRaftWAL appends a half-written record to the last segment of a raft
// WAL directory. etcd's records are an 8-byte little-endian length (the
// top byte flags padding) and the record padded to 8 bytes; a segment is
// preallocated with zeros, and a zero length ends it. The torn record
// claims 2 KiB: its first sector is written, the rest are still zeros, as
// when power fails between sector writes.
func tearRaftWAL(t *testing.T, dir string) {
	t.Helper()
	segs, err := filepath.Glob(filepath.Join(dir, "*.wal"))
	if err != nil || len(segs) == 0 {
		t.Fatalf("raft WAL segments in %s: %v, %v", dir, segs, err)
	}
	slices.Sort(segs)
	path := segs[len(segs)-1]
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	off := 0
	for off+8 <= len(data) {
		field := binary.LittleEndian.Uint64(data[off:])
		if field == 0 {
			break
		}
		size := int(field &^ (0xff << 56))
		if field>>63 == 1 {
			size += int(field >> 56 & 0x7)
		}
		off += 8 + size
	}
	const recBytes, sector = 2048, 512
	if off+8+recBytes > len(data) {
		t.Fatalf("raft WAL %s: no room after its last record at %d", path, off)
	}
	binary.LittleEndian.PutUint64(data[off:], recBytes)
	start := off + 8
	written := sector - start%sector // up to the first sector boundary
	for i := range recBytes {
		b := byte(0)
		if i < written {
			b = byte(i*13 + 5)
		}
		data[start+i] = b
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Logf("raft WAL %s: torn record at offset %d", filepath.Base(path), off)
}
