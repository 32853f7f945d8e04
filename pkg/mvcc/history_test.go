package mvcc

import (
	"errors"
	"fmt"
	"log/slog"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

func TestHistoryGuard(t *testing.T) {
	g := &historyGuard{log: slog.New(slog.DiscardHandler)}
	if err := g.behind(5, 5); err != nil || g.lost() != nil {
		t.Fatalf("storage at the published revision: %v, %v", err, g.lost())
	}
	if err := g.note(ErrUnavailable); !errors.Is(err, ErrUnavailable) || g.lost() != nil {
		t.Fatalf("an unavailable storage is not a lost history: %v, %v", err, g.lost())
	}
	none := g.alarms(7, pb.AlarmType_NONE, nil)
	if len(none) != 0 {
		t.Fatalf("alarms before a loss: %v", none)
	}

	first := g.behind(4, 5)
	if !errors.Is(first, ErrHistoryLost) || g.lost() != first {
		t.Fatalf("storage behind: %v, lost %v", first, g.lost())
	}
	// The first cause stays the answer.
	g.note(fmt.Errorf("driver: %w", ErrHistoryLost))
	if g.lost() != first {
		t.Fatalf("lost changed to %v", g.lost())
	}
	nospace := []*pb.AlarmMember{{MemberID: 7, Alarm: pb.AlarmType_NOSPACE}}
	got := g.alarms(7, pb.AlarmType_NONE, nospace)
	if len(got) != 2 || got[1].Alarm != pb.AlarmType_CORRUPT || got[1].MemberID != 7 || len(nospace) != 1 {
		t.Fatalf("alarms after a loss: %v (stored %v)", got, nospace)
	}
	if got := g.alarms(7, pb.AlarmType_NOSPACE, nospace); len(got) != 1 {
		t.Fatalf("NOSPACE alarms after a loss: %v", got)
	}
	corrupt := []*pb.AlarmMember{{MemberID: 7, Alarm: pb.AlarmType_CORRUPT}}
	if got := g.alarms(7, pb.AlarmType_CORRUPT, corrupt); len(got) != 1 {
		t.Fatalf("CORRUPT listed twice: %v", got)
	}
}
