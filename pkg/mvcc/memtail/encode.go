package memtail

import (
	"encoding/binary"
	"errors"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/kite-db/kite/pkg/mvcc"
)

// A batch in the log is its ops, each a kind byte and the fields that
// kind replays, as varints and length-prefixed bytes. The format is
// versioned by its first byte so that a later kite can still read a log
// an earlier one wrote.
const batchFormat = 1

func encodeBatch(bt *batch) []byte {
	buf := make([]byte, 0, 64+32*len(bt.ops))
	buf = append(buf, batchFormat)
	for i := range bt.ops {
		o := &bt.ops[i]
		buf = append(buf, byte(o.kind))
		switch o.kind {
		case opPut:
			buf = append(buf, boolByte(o.liveBefore))
			buf = binary.AppendVarint(buf, o.sub)
			buf = appendBytes(buf, o.kv.Key)
			buf = appendBytes(buf, o.kv.Value)
			buf = binary.AppendVarint(buf, o.kv.CreateRevision)
			buf = binary.AppendVarint(buf, o.kv.ModRevision)
			buf = binary.AppendVarint(buf, o.kv.Version)
			buf = binary.AppendVarint(buf, o.kv.Lease)
		case opDelete:
			buf = append(buf, boolByte(o.liveBefore))
			buf = binary.AppendVarint(buf, o.sub)
			buf = appendBytes(buf, o.kv.Key)
			buf = binary.AppendVarint(buf, o.kv.ModRevision)
		case opSetRevisions:
			buf = binary.AppendVarint(buf, o.current)
			buf = binary.AppendVarint(buf, o.compacted)
		case opPutLease:
			buf = binary.AppendVarint(buf, o.lease.ID)
			buf = binary.AppendVarint(buf, o.lease.TTL)
		case opDeleteLease:
			buf = binary.AppendVarint(buf, o.lease.ID)
		case opPutAuth:
			buf = appendBytes(buf, o.auth)
		case opPutAlarm, opDeleteAlarm:
			buf = binary.AppendUvarint(buf, o.alarm.MemberID)
			buf = binary.AppendVarint(buf, int64(o.alarm.Alarm))
		case opCompact:
			buf = binary.AppendVarint(buf, o.compacted)
			buf = binary.AppendVarint(buf, o.from)
			buf = binary.AppendVarint(buf, o.to)
		}
	}
	return buf
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

func appendBytes(buf, b []byte) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(b)))
	return append(buf, b...)
}

// decoder reads the fields encodeBatch wrote; the first error sticks.
type decoder struct {
	b   []byte
	err error
}

var errShort = errors.New("record ends inside a field")

func (d *decoder) bool() bool {
	if d.err != nil {
		return false
	}
	if len(d.b) == 0 {
		d.err = errShort
		return false
	}
	v := d.b[0] != 0
	d.b = d.b[1:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = errShort
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errShort
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if uint64(len(d.b)) < n {
		d.err = errShort
		return nil
	}
	// A copy with its own capacity: the record's buffer is not kept.
	out := append(make([]byte, 0, n), d.b[:n]...)
	d.b = d.b[n:]
	return out
}

func decodeBatch(rec []byte) (*batch, error) {
	if len(rec) == 0 || rec[0] != batchFormat {
		return nil, fmt.Errorf("memtail: log record of an unknown format")
	}
	d := &decoder{b: rec[1:]}
	bt := newBatch()
	for len(d.b) > 0 && d.err == nil {
		kind := opKind(d.b[0])
		d.b = d.b[1:]
		o := op{kind: kind}
		switch kind {
		case opPut:
			o.liveBefore = d.bool()
			o.sub = d.varint()
			kv := &mvccpb.KeyValue{}
			kv.Key = d.bytes()
			kv.Value = d.bytes()
			kv.CreateRevision = d.varint()
			kv.ModRevision = d.varint()
			kv.Version = d.varint()
			kv.Lease = d.varint()
			o.kv = kv
		case opDelete:
			o.liveBefore = d.bool()
			o.sub = d.varint()
			key := d.bytes()
			o.kv = &mvccpb.KeyValue{Key: key, ModRevision: d.varint()}
		case opSetRevisions:
			o.current = d.varint()
			o.compacted = d.varint()
		case opPutLease:
			o.lease = mvcc.Lease{ID: d.varint()}
			o.lease.TTL = d.varint()
		case opDeleteLease:
			o.lease = mvcc.Lease{ID: d.varint()}
		case opPutAuth:
			o.auth = d.bytes()
		case opPutAlarm, opDeleteAlarm:
			member := d.uvarint()
			o.alarm = &pb.AlarmMember{MemberID: member, Alarm: pb.AlarmType(d.varint())}
		case opCompact:
			o.compacted = d.varint()
			o.from = d.varint()
			o.to = d.varint()
		default:
			return nil, fmt.Errorf("memtail: log record holds an unknown op %d", kind)
		}
		if d.err == nil {
			bt.add(o)
		}
	}
	if d.err != nil {
		return nil, fmt.Errorf("memtail: log record: %w", d.err)
	}
	return bt, nil
}
