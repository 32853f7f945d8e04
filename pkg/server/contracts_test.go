package server

import (
	"github.com/kite-db/kite/pkg/drivers/mysql"
	"github.com/kite-db/kite/pkg/drivers/postgres"
	"github.com/kite-db/kite/pkg/drivers/raftsql"
	"github.com/kite-db/kite/pkg/drivers/sqlite"
	"github.com/kite-db/kite/pkg/mvcc/memtail"
)

// The optional parts of a Backend the server reports metrics from are
// declared here, by their consumer; every storage pkg/datastore can give
// the server is checked against the ones it implements, so a renamed
// method fails the build instead of silently dropping its metrics.
var (
	_ Clustered      = (*raftsql.Node)(nil)
	_ commitObserver = (*raftsql.Node)(nil)
	_ commitObserver = (*sqlite.Backend)(nil)
	_ commitObserver = (*memtail.Backend)(nil)
	_ commitObserver = (*postgres.Backend)(nil)
	_ commitObserver = (*mysql.Backend)(nil)
	_ poolStater     = (*postgres.Backend)(nil)
	_ listenStater   = (*postgres.Backend)(nil)
	_ listenStater   = (*mysql.Backend)(nil)
	_ wakeStater     = (*mysql.Backend)(nil)
)
