package main

import "testing"

// TestLoadBatch: etcd and kite are loaded in transactions of up to
// --load-txn-ops puts within loadTxnBytes; kine, which refuses a
// transaction of bare puts, one put at a time.
func TestLoadBatch(t *testing.T) {
	cfg := &config{loadTxnOps: loadTxnOps}
	for _, tc := range []struct {
		name    string
		partial bool
		valSize int
		want    int
	}{
		{"1 KiB values", false, 1024, 128},
		{"values large enough to meet the byte bound", false, 64 << 10, loadTxnBytes / (64<<10 + 128)},
		{"values larger than the byte bound", false, 2 << 20, 1},
		{"kine", true, 1024, 1},
	} {
		if got := loadBatch(cfg, &target{name: tc.name, partial: tc.partial}, tc.valSize); got != tc.want {
			t.Errorf("%s: loadBatch = %d, want %d", tc.name, got, tc.want)
		}
	}
}
