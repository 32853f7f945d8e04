package main

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// kine answers what it leaves out with Unimplemented; such a workload is
// "unsupported by kine", any other outright failure "failed on kine".
func TestUnsupportedResult(t *testing.T) {
	s := spec{name: "get-serializable", label: "get-serializable", clients: 4}
	unimpl := status.Error(codes.Unimplemented, "serializable is not implemented by kine")
	for _, tc := range []struct {
		name string
		r    result
		err  error
		want string
	}{
		{"every operation failed", result{Workload: s.label, Target: "kine", Errors: 7, FirstError: unimpl.Error()}, nil,
			"unsupported by kine: rpc error: code = Unimplemented desc = serializable is not implemented by kine"},
		{"workload returned the error", result{}, fmt.Errorf("create 4 watchers: %w", unimpl),
			"unsupported by kine: create 4 watchers: rpc error: code = Unimplemented desc = serializable is not implemented by kine"},
		{"another error", result{}, fmt.Errorf("read current revision: connection refused"),
			"failed on kine: read current revision: connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := unsupportedResult("kine", s, tc.r, tc.err)
			if r.Note != tc.want || !r.NotServed || r.Target != "kine" || r.Workload != s.label {
				t.Errorf("unsupportedResult = %+v, want note %q", r, tc.want)
			}
			var b strings.Builder
			if err := writeRatios(&b, []result{{Workload: s.label, Target: "kite", Ops: 10, OpsPerSec: 5}, r}, "kite", "kine"); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(b.String(), tc.want) {
				t.Errorf("ratio table does not show the note:\n%s", b.String())
			}
		})
	}
}
