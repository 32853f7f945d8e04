package test

import (
	"context"
	"fmt"
	"math/rand"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"
)

// TestDiffMaintenance: the Maintenance RPCs a client sees the same on both
// servers — alarms (a NOSPACE alarm refuses puts and lease grants but not
// deletes until it is disarmed), Status listing the alarm, HashKV's
// revisions and errors, Hash, Defragment. Hash values and member IDs are
// storage- and member-specific and normalised away.
func TestDiffMaintenance(t *testing.T) {
	p := newPair(t)
	nospace := func(a pb.AlarmRequest_AlarmAction) *pb.AlarmRequest {
		return &pb.AlarmRequest{Action: a, Alarm: pb.AlarmType_NOSPACE}
	}
	p.run([]step{
		{"put a", put("a", "1")},
		{"put b", put("b", "2")},
		{"put a again", put("a", "3")},
		{"hashkv never compacted", &pb.HashKVRequest{}},
		{"alarm list empty", &pb.AlarmRequest{Action: pb.AlarmRequest_GET}},
		{"activate nospace", nospace(pb.AlarmRequest_ACTIVATE)},
		{"alarm list", &pb.AlarmRequest{Action: pb.AlarmRequest_GET}},
		{"alarm list nospace only", &pb.AlarmRequest{Action: pb.AlarmRequest_GET, Alarm: pb.AlarmType_NOSPACE}},
		{"status lists the alarm", &pb.StatusRequest{}},
		{"put refused", put("c", "3")},
		{"txn with put refused", txn(nil, ops(opPut(put("c", "3"))), nil)},
		{"lease grant refused", &pb.LeaseGrantRequest{ID: 5, TTL: 60}},
		{"read allowed", all()},
		{"delete allowed", del("b", "")},
		{"read-only txn allowed", txn(nil, ops(opRange(all())), nil)},
		{"compact allowed", &pb.CompactionRequest{Revision: 2}},
		{"deactivate nospace", nospace(pb.AlarmRequest_DEACTIVATE)},
		{"alarm list empty again", &pb.AlarmRequest{Action: pb.AlarmRequest_GET}},
		{"deactivate again", nospace(pb.AlarmRequest_DEACTIVATE)},
		{"put after disarm", put("c", "4")},
		{"hashkv current", &pb.HashKVRequest{}},
		{"hashkv at revision", &pb.HashKVRequest{Revision: 4}},
		{"hashkv compacted", &pb.HashKVRequest{Revision: 1}},
		{"hashkv future", &pb.HashKVRequest{Revision: 100}},
		{"hash", &pb.HashRequest{}},
		{"defragment", &pb.DefragmentRequest{}},
		{"status", &pb.StatusRequest{}},
		{"after all", all()},
	})
}

// TestDiffNospaceRaised: a NOSPACE alarm a server raises itself, when a put
// finds its quota exhausted, names that server's own member ID (the one its
// response headers carry) on both servers, and is disarmed by that ID.
func TestDiffNospaceRaised(t *testing.T) {
	p := newPair(t, "--quota-backend-bytes=4194304")
	// The two storages fill at different rates, so the fill is one step:
	// puts until the first refusal, which must be NOSPACE on both.
	fill := op(func(ctx context.Context, s *server) (proto.Message, error) {
		// Incompressible: Postgres would store a repeated byte in nothing.
		value := make([]byte, 64<<10)
		rand.New(rand.NewSource(1)).Read(value)
		for i := range 1000 {
			if _, err := s.KV.Put(ctx, &pb.PutRequest{Key: fmt.Appendf(nil, "fill/%04d", i), Value: value}); err != nil {
				return nil, err
			}
		}
		return nil, fmt.Errorf("%s: 1000 puts of 64 KiB and no NOSPACE", s.name)
	})
	disarmSelf := op(func(ctx context.Context, s *server) (proto.Message, error) {
		st, err := s.Maint.Status(ctx, &pb.StatusRequest{})
		if err != nil {
			return nil, err
		}
		return s.Maint.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_DEACTIVATE,
			MemberID: st.Header.MemberId, Alarm: pb.AlarmType_NOSPACE})
	})
	// Each server stopped after its own number of puts, so revisions
	// differ from here on and are left out.
	p.run([]step{
		{"fill until NOSPACE", fill},
		{"alarm list names this member", withoutRevision(&pb.AlarmRequest{Action: pb.AlarmRequest_GET})},
		{"status lists the alarm", withoutRevision(&pb.StatusRequest{})},
		{"put refused", put("after", "1")},
		{"disarm this member's alarm", withoutRevision(disarmSelf)},
		{"alarm list empty", withoutRevision(&pb.AlarmRequest{Action: pb.AlarmRequest_GET})},
	})
}

// withoutRevision runs req and clears the revision of its response header.
func withoutRevision(req any) op {
	return func(ctx context.Context, s *server) (proto.Message, error) {
		resp, err := do(ctx, s, req)
		if h, ok := resp.(interface{ GetHeader() *pb.ResponseHeader }); ok && h.GetHeader() != nil {
			h.GetHeader().Revision = 0
		}
		return resp, err
	}
}
