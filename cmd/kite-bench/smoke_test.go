package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestMain lets --compare re-execute the test binary as the reference etcd,
// exactly as it re-executes kite-bench.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == etcdServerCommand {
		os.Exit(runEtcdServer(os.Args[2:]))
	}
	os.Exit(m.Run())
}

// Test_SmokeAgainstEmbeddedEtcd runs every workload tiny against an etcd
// embedded in the test process. It checks what the tool reports, never
// how fast anything was.
func Test_SmokeAgainstEmbeddedEtcd(t *testing.T) {
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	endpoint := "http://127.0.0.1:" + strconv.Itoa(port)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e, err := startEmbedded(ctx, "smoke", filepath.Join(t.TempDir(), "etcd"), endpoint)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()

	results := runSmoke(t, "--smoke", "--endpoints", endpoint)
	checkEveryWorkload(t, results, []string{endpoint})
}

// Test_SmokeCompare runs --compare with a second reference etcd standing in
// for kite (or the kite binary named by $KITE_BENCH_KITE_BINARY), which
// exercises starting, measuring and stopping server processes.
func Test_SmokeCompare(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two server processes")
	}
	kite := os.Getenv("KITE_BENCH_KITE_BINARY")
	if kite == "" {
		kite = "etcd"
	}
	results := runSmoke(t, "--smoke", "--compare", "--kite-binary", kite,
		"--memory-keys", "300", "--work-dir", t.TempDir())
	checkEveryWorkload(t, results, []string{"etcd", "kite"})
	for _, target := range []string{"etcd", "kite"} {
		r, ok := results[target+"/memory-300"]
		if !ok || r.RSSBytes <= 0 || r.Ops != 300 {
			t.Errorf("%s memory result = %+v, want 300 keys and a resident size", target, r)
		}
	}
}

// runSmoke runs kite-bench with args and returns its JSON lines by
// "target/workload".
func runSmoke(t *testing.T, args ...string) map[string]result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := runMain(args, &stdout, &stderr); code != 0 {
		t.Fatalf("kite-bench %s: exit code %d\nstderr:\n%s\nstdout:\n%s", strings.Join(args, " "), code, &stderr, &stdout)
	}
	results := map[string]result{}
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.HasPrefix(line, []byte("{")) {
			continue // the human-readable tables
		}
		var r result
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("JSON line %q: %v", line, err)
		}
		results[r.Target+"/"+r.Workload] = r
	}
	return results
}

// checkEveryWorkload wants one correct result per default workload and
// target: operations done, no errors, nothing missed or duplicated.
func checkEveryWorkload(t *testing.T, results map[string]result, targets []string) {
	t.Helper()
	for _, target := range targets {
		for wl := range strings.SplitSeq(defaultWorkloads, ",") {
			r, ok := results[target+"/"+wl]
			switch {
			case !ok:
				t.Errorf("%s/%s: no JSON line", target, wl)
			case r.Ops <= 0 || r.Errors != 0 || r.Missed != 0 || r.Duplicates != 0:
				t.Errorf("%s/%s = %+v, want ops > 0 and no errors, missed or duplicates", target, wl, r)
			}
		}
	}
}
