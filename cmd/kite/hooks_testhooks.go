//go:build kitetest

package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/kite-db/kite/pkg/drivers/raftsql"
)

// The test hooks of the kite binary, compiled only with -tags kitetest
// (as the tests build kite); hooks.go is the release build's, which has
// none of them, so no environment can turn them on in production.

// setTestResolver: KITE_TEST_DNS_SERVER=127.0.0.1:PORT sends every name
// lookup of this process (listening, dialing peers, --discovery-srv) to
// that DNS server. Tests serve a cluster's names and SRV records
// themselves and change them while kite runs (test/dnsserver_test.go).
// Called once, first thing in main, before anything looks a name up.
func setTestResolver() {
	if addr := os.Getenv("KITE_TEST_DNS_SERVER"); addr != "" {
		net.DefaultResolver = &net.Resolver{PreferGo: true,
			Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, network, addr)
			}}
	}
}

// testPeerFaults: KITE_TEST_PEER_FAULTS=1 serves raftsql's peer fault
// hooks (pkg/drivers/raftsql/faults_testhooks.go).
func testPeerFaults() raftsql.TestFaults {
	return raftsql.TestFaults{Serve: os.Getenv("KITE_TEST_PEER_FAULTS") == "1"}
}

// testCopyPause: KITE_TEST_COPY_PAUSE_BEFORE_COMMIT=DURATION makes kite
// copy wait that long with everything written and nothing committed, so
// a test can kill it at the worst moment.
func testCopyPause() (time.Duration, error) {
	v := os.Getenv("KITE_TEST_COPY_PAUSE_BEFORE_COMMIT")
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("KITE_TEST_COPY_PAUSE_BEFORE_COMMIT: %w", err)
	}
	return d, nil
}

// testMaxChanges: KITE_TEST_MAX_CHANGES_PER_REVISION=N lowers the most
// changes one revision may hold in the SQLite databases
// (sqlite.Options.MaxChangesPerRevision), so a test reaches
// mvcc.ErrTooManyChanges with N+1 keys rather than a million.
func testMaxChanges() (int64, error) {
	v := os.Getenv("KITE_TEST_MAX_CHANGES_PER_REVISION")
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("KITE_TEST_MAX_CHANGES_PER_REVISION=%q: want a positive number", v)
	}
	return n, nil
}
