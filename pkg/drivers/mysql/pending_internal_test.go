package mysql

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// TestPendingBatches: the pending writes of a transaction come out as
// batches that each fit the budget (a row larger than it alone), with as
// many arguments as placeholders, the final live state of each key once,
// and the revisions last.
func TestPendingBatches(t *testing.T) {
	const packet = 256 << 10 // a budget of 128 KiB
	var p pending
	value := bytes.Repeat([]byte{'\''}, 10<<10)
	for i := range 100 {
		key := fmt.Appendf(nil, "k%03d", i%60) // keys 0-39 written twice
		p.appendLog(logRow{rev: int64(i + 1), key: key, value: value})
		p.setLive(key, &mvccpb.KeyValue{Key: key, ModRevision: int64(i + 1), Value: value})
	}
	p.setLive([]byte("k001"), nil) // deleted after its puts
	huge := bytes.Repeat([]byte{0}, 200<<10)
	p.appendLog(logRow{rev: 101, key: []byte("huge"), value: huge})
	p.setLease(7, 10, false)
	p.setLease(7, 0, true)
	p.statement(sqlPutAlarm, int64(1), int32(1))
	p.setRevisions(101, 0, false)

	batches := p.batches(packet)
	var sqls []string
	for i, b := range batches {
		if n := strings.Count(b.sql, "?"); n != len(b.args) {
			t.Errorf("batch %d: %d placeholders, %d arguments", i, n, len(b.args))
		}
		if b.size > packet/2 && len(b.args) > 8 {
			t.Errorf("batch %d: %d bytes with %d arguments, over the budget of %d", i, b.size, len(b.args), packet/2)
		}
		sqls = append(sqls, b.sql)
	}
	all := strings.Join(sqls, "; ")
	if got := strings.Count(all, rowUpsertLive); got != 59 {
		t.Errorf("%d live rows upserted, want 59 (60 keys, one deleted)", got)
	}
	if got := strings.Count(all, rowInsertLog); got != 101 {
		t.Errorf("%d log rows inserted, want 101", got)
	}
	if !strings.Contains(all, sqlDeleteLive+"(?)") || !strings.Contains(all, sqlDeleteLease) ||
		strings.Contains(all, sqlPutLease) || !strings.Contains(all, sqlPutAlarm) {
		t.Errorf("live delete, lease delete or alarm missing, or a lease put not collapsed:\n%.2000s", all)
	}
	if !strings.HasSuffix(all, sqlSetRevisions) {
		t.Errorf("the revisions are not set last")
	}
	if len(batches) < 10 {
		t.Errorf("%d batches for over 2 MiB of rows in a budget of 128 KiB", len(batches))
	}
}
