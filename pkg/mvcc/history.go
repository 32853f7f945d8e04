package mvcc

import (
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// historyGuard makes a lost history final. Once the storage is found behind
// what this Store published (its current revision is below ours), or the
// driver reports ErrHistoryLost (pkg/drivers/postgres compares timelines),
// the next write would number a revision that watchers and clients already
// know with other data. Nothing read from that storage can be trusted to
// agree with what was served either, so every request is refused from then
// on, every watch stream is ended with the error, and the CORRUPT alarm of
// this member is listed (memory only: the storage is the thing that cannot
// be trusted to hold it). Only a restart
// clears it, since this process's memory holds the revisions the storage
// lost; the operator decides first whether to restore the database or to
// accept the loss.
type historyGuard struct {
	log *slog.Logger
	// onLost is told once, when the loss is found (the watch hub ends its
	// streams with it).
	onLost func(error)
	err    atomic.Pointer[error]
}

// lost returns the error every request is refused with, nil while the
// history is whole.
func (g *historyGuard) lost() error {
	if p := g.err.Load(); p != nil {
		return *p
	}
	return nil
}

// note records err when it says the history is lost, logging it once, and
// returns err.
func (g *historyGuard) note(err error) error {
	if err == nil || !errors.Is(err, ErrHistoryLost) {
		return err
	}
	if g.err.CompareAndSwap(nil, &err) {
		g.log.Error("the storage's history is behind what this server served: refusing every request; "+
			"restore the database, or accept the loss and restart every kite server (docs/failover.md)", "err", err)
		if g.onLost != nil {
			g.onLost(err)
		}
	}
	return err
}

// behind checks a storage's current revision against the revision this
// Store had published before it read it: a storage that moved backwards
// lost revisions that were served.
func (g *historyGuard) behind(storage, published int64) error {
	if storage >= published {
		return nil
	}
	return g.note(fmt.Errorf("%w: the storage's current revision is %d, this server already served revision %d",
		ErrHistoryLost, storage, published))
}

// alarms adds this member's CORRUPT alarm to a GET's answer while the
// history is lost.
func (g *historyGuard) alarms(member uint64, t pb.AlarmType, alarms []*pb.AlarmMember) []*pb.AlarmMember {
	if g.lost() == nil || (t != pb.AlarmType_NONE && t != pb.AlarmType_CORRUPT) {
		return alarms
	}
	for _, a := range alarms {
		if a.MemberID == member && a.Alarm == pb.AlarmType_CORRUPT {
			return alarms
		}
	}
	return append(append([]*pb.AlarmMember{}, alarms...), &pb.AlarmMember{MemberID: member, Alarm: pb.AlarmType_CORRUPT})
}
