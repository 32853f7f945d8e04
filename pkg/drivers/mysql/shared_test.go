package mysql_test

import (
	"testing"

	"github.com/kite-db/kite/pkg/drivers/mysql/mysqltest"
	"github.com/kite-db/kite/pkg/mvcc"
	"github.com/kite-db/kite/pkg/mvcc/backendtest"
)

// TestShared: two servers on one database wake each other after their
// commits, record renewals where the other's expiry check reads them, and
// agree on one primary.
func TestShared(t *testing.T) {
	backendtest.RunShared(t, func(t *testing.T) (mvcc.Backend, mvcc.Backend) {
		dsn := mysqltest.NewDatabase(t)
		return mustOpen(t, dsn), mustOpen(t, dsn)
	})
}
