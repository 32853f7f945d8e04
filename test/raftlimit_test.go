package test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestRaftSQLTooManyChanges: a DeleteRange of more keys than one revision
// may hold is a committed entry every member refuses alike
// (mvcc.ErrTooManyChanges): the client that sent it, through a follower,
// gets the error; nothing is deleted; every member stays up with the same
// HashKV; and the writes after it go on. The bound is lowered to 8 changes
// by KITE_TEST_MAX_CHANGES_PER_REVISION, which only the -tags kitetest
// binary the tests build reads, so 12 keys reach it instead of a million.
func TestRaftSQLTooManyChanges(t *testing.T) {
	if againstEtcd {
		t.Skip("etcd has no bound on the changes one revision holds")
	}
	const limit = 8
	t.Setenv("KITE_TEST_MAX_CHANGES_PER_REVISION", fmt.Sprint(limit))
	c := startCluster(t, 3)
	ctx := testCtx(t, time.Minute)
	l := c.leaderIndex(t)
	lead, follower := c.members[l], c.members[(l+1)%len(c.members)]
	for i := range limit + 4 {
		if _, err := lead.Client.Put(ctx, fmt.Sprintf("/many/%02d", i), "v"); err != nil {
			t.Fatalf("put: %v", err)
		}
	}

	_, err := follower.Client.Delete(ctx, "/many/", clientv3.WithPrefix())
	if err == nil || !strings.Contains(err.Error(), "too many changes") {
		t.Fatalf("delete of %d keys through %s: %v; want the too-many-changes error", limit+4, follower.name, err)
	}
	// At the bound it goes through, on the same members.
	del, err := follower.Client.Delete(ctx, "/many/00", clientv3.WithRange(fmt.Sprintf("/many/%02d", limit)))
	if err != nil || del.Deleted != limit {
		t.Fatalf("delete of %d keys: %v, %v", limit, del, err)
	}
	put, err := lead.Client.Put(ctx, "/after", "v")
	if err != nil {
		t.Fatalf("put after the refused delete: %v", err)
	}
	for _, m := range c.members {
		if _, err := m.status(); err != nil {
			t.Fatalf("member %s after the refused delete: %v\nlog:\n%s", m.name, err, m.log.Tail(4096))
		}
		get, err := m.Client.Get(ctx, "/many/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil || get.Count != 4 || get.Header.Revision < put.Header.Revision {
			t.Fatalf("keys left on %s: %v, %v; want 4 at revision %d or later", m.name, get, err, put.Header.Revision)
		}
	}
	sameHashKV(t, ctx, c, put.Header.Revision)
}
