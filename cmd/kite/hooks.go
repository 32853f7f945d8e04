//go:build !kitetest

package main

import (
	"time"

	"github.com/kite-db/kite/pkg/drivers/raftsql"
)

// A release build has no test hooks (hooks_testhooks.go holds them, for
// -tags kitetest): the KITE_TEST_ variables they read mean nothing to it.

func setTestResolver()                      {}
func testPeerFaults() raftsql.TestFaults    { return raftsql.TestFaults{} }
func testCopyPause() (time.Duration, error) { return 0, nil }
func testMaxChanges() (int64, error)        { return 0, nil }
