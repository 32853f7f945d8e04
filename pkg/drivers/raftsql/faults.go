//go:build !kitetest

package raftsql

import "net/http"

// TestFaults is empty in a release build: the fault hooks
// (faults_testhooks.go) are compiled only with -tags kitetest, so no
// production binary can be made to fail its applies.
type TestFaults struct{}

// handleFaults serves nothing in a release build.
func (n *Node) handleFaults(*http.ServeMux) {}
