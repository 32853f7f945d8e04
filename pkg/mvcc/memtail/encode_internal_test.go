package memtail

import (
	"fmt"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/kite-db/kite/pkg/mvcc"
)

// TestEncodeRoundTrip: every kind of op comes back from the log as it
// went in.
func TestEncodeRoundTrip(t *testing.T) {
	bt := newBatch()
	for _, o := range []op{
		{kind: opPut, liveBefore: true, sub: 3, kv: &mvccpb.KeyValue{Key: []byte("k\x00\xff"), Value: []byte("v"), CreateRevision: 2, ModRevision: 9, Version: 4, Lease: -5}},
		{kind: opPut, sub: 0, kv: &mvccpb.KeyValue{Key: []byte("e"), Value: nil, CreateRevision: 9, ModRevision: 9, Version: 1}},
		{kind: opDelete, liveBefore: true, sub: 1, kv: &mvccpb.KeyValue{Key: []byte("d"), ModRevision: 9}},
		{kind: opSetRevisions, current: 9, compacted: 4},
		{kind: opPutLease, lease: mvcc.Lease{ID: 1<<62 + 7, TTL: 30}},
		{kind: opDeleteLease, lease: mvcc.Lease{ID: 12}},
		{kind: opPutAuth, auth: []byte{1, 2, 0, 3}},
		{kind: opPutAlarm, alarm: &pb.AlarmMember{MemberID: 1<<63 + 1, Alarm: pb.AlarmType_NOSPACE}},
		{kind: opDeleteAlarm, alarm: &pb.AlarmMember{MemberID: 3, Alarm: pb.AlarmType_CORRUPT}},
		{kind: opCompact, compacted: 4, from: 1, to: 4},
	} {
		bt.add(o)
	}
	rec := encodeBatch(bt)
	got, err := decodeBatch(rec)
	if err != nil {
		t.Fatal(err)
	}
	if g, w := show(got), show(bt); g != w {
		t.Fatalf("decoded:\n%s\nwant:\n%s", g, w)
	}
}

func show(bt *batch) string {
	s := ""
	for _, o := range bt.ops {
		s += fmt.Sprintf("%d live=%v sub=%d kv=%v lease=%v auth=%v alarm=%v revs=%d/%d range=%d-%d\n",
			o.kind, o.liveBefore, o.sub, o.kv, o.lease, o.auth, o.alarm, o.current, o.compacted, o.from, o.to)
	}
	return s
}
