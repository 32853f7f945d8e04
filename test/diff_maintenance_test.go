package test

import (
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
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
