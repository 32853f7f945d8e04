package postgres

import (
	"testing"

	"github.com/kite-db/kite/pkg/mvcc"
)

func TestPayloads(t *testing.T) {
	const origin = "0123456789abcdef"
	all := mvcc.ChangedLeases | mvcc.ChangedAlarms | mvcc.ChangedCompacted | mvcc.ChangedAuth
	for _, tc := range []struct {
		payload string
		want    mvcc.Notice
	}{
		{commitPayload(origin, 1<<62, all), mvcc.Notice{Rev: 1 << 62, Changed: all}},
		{commitPayload(origin, 5, 0), mvcc.Notice{Rev: 5}},
		// A user added, or a lease granted, before the first key.
		{commitPayload(origin, 0, mvcc.ChangedAuth), mvcc.Notice{Changed: mvcc.ChangedAuth}},
		{renewPayload(origin, -3), mvcc.Notice{Renewed: -3}},
	} {
		if len(tc.payload) >= 100 {
			t.Errorf("payload %q is %d bytes, want < 100", tc.payload, len(tc.payload))
		}
		o, n, err := parsePayload(tc.payload)
		if err != nil || o != origin || n != tc.want {
			t.Errorf("parsePayload(%q) = %q, %+v, %v; want %q, %+v", tc.payload, o, n, err, origin, tc.want)
		}
	}
	for _, bad := range []string{"", "x", "o commit", "o commit 0 0", "o commit -1 8", "o commit 1 256", "o renew x", "o other 1"} {
		if _, _, err := parsePayload(bad); err == nil {
			t.Errorf("parsePayload(%q) succeeded", bad)
		}
	}
}
