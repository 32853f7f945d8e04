package mysql_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/kite-db/kite/pkg/drivers/mysql/mysqltest"
)

// TestSizeFollowsWrites: Size counts what was just written, not what
// InnoDB's statistics last sampled, so a quota stops writes when the
// database reaches it (the statistics would lag it by seconds to minutes).
func TestSizeFollowsWrites(t *testing.T) {
	ctx := context.Background()
	b := mustOpen(t, mysqltest.NewDatabase(t))
	before, _, err := b.Size(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const n, each = 20, 200_000
	for i := range n {
		v := make([]byte, each)
		rand.Read(v) // incompressible, so its size is its size anywhere
		if err := commitPuts(t, b, int64(i+1), &mvccpb.KeyValue{Key: fmt.Appendf(nil, "big/%02d", i), Value: v}); err != nil {
			t.Fatal(err)
		}
	}
	after, inUse, err := b.Size(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Size before %d bytes, after %d KB of values %d bytes (in use, from the statistics: %d)", before, n*each/1000, after, inUse)
	if after-before < n*each {
		t.Errorf("Size grew by %d bytes after %d bytes of values were committed", after-before, n*each)
	}
	if inUse > after {
		t.Errorf("in use %d > size %d", inUse, after)
	}
}
