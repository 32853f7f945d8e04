//go:build !kitetest

package raftsql

import "net/http"

// handleFaults serves nothing in a release build, whatever
// Config.TestFaults says: the fault hooks (faults_testhooks.go) are
// compiled only with -tags kitetest, so no production binary can be made
// to fail its applies.
func (n *Node) handleFaults(*http.ServeMux) {}
