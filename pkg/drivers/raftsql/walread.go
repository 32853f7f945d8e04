package raftsql

import (
	"errors"
	"fmt"
	"io"
	"log/slog"

	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.etcd.io/etcd/server/v3/storage/wal/walpb"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
)

// readWAL opens the WAL from walSnap on and reads it whole, for writing.
//
// A power loss can leave the last record of the last segment half written:
// etcd's decoder reports that torn tail, and only that, as
// io.ErrUnexpectedEOF. Such a record was never synced, so this member never
// acknowledged it to the leader, which sends it again: the WAL is cut
// before it (wal.Repair keeps the damaged file as .broken) and read once
// more, as etcd does at start. Any other damage (a CRC mismatch in a
// complete record, a second torn tail) stops the start instead: replaying
// it would apply what no leader sent.
func readWAL(zlog *zap.Logger, log *slog.Logger, walDir string, walSnap *walpb.Snapshot) (*wal.WAL, []byte, *raftpb.HardState, []*raftpb.Entry, error) {
	repaired := false
	for {
		w, err := wal.Open(zlog, walDir, walSnap)
		if err != nil {
			return nil, nil, nil, nil, fmt.Errorf("open WAL: %w", err)
		}
		metadata, hs, ents, err := w.ReadAll()
		if err == nil {
			return w, metadata, hs, ents, nil
		}
		w.Close()
		if repaired || !errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, nil, nil, nil, fmt.Errorf("read WAL: %w", err)
		}
		log.Warn("the WAL ends in a partly written record (a crash or power loss during a write): cutting it off, the leader sends it again",
			"dir", walDir, "err", err)
		if !wal.Repair(zlog, walDir) {
			return nil, nil, nil, nil, fmt.Errorf("read WAL: %w; repairing its torn tail failed", err)
		}
		repaired = true
	}
}
