package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLogFlags: etcd's --logger (zap, its only logger, accepted; anything
// else refused with etcd's words) and --log-outputs (stderr and files,
// together), also through ETCD_ variables as an etcd manifest sets them.
func TestLogFlags(t *testing.T) {
	file := filepath.Join(t.TempDir(), "kite.log")
	env := map[string]string{"ETCD_LOG_OUTPUTS": "stderr," + file, "ETCD_WARNING_APPLY_DURATION": "250ms"}
	f, err := parseServeFlags([]string{"--logger", "zap"}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if cfg := f.config(nil); cfg.WarningApplyDuration.String() != "250ms" {
		t.Errorf("ETCD_WARNING_APPLY_DURATION: config has %v", cfg.WarningApplyDuration)
	}
	var stderr bytes.Buffer
	log, err := f.newLogger(&stderr)
	if err != nil {
		t.Fatal(err)
	}
	log.Warn("both outputs")
	b, err := os.ReadFile(file)
	if err != nil || !strings.Contains(string(b), "both outputs") || !strings.Contains(stderr.String(), "both outputs") {
		t.Errorf("log line in the file: %q (%v); on stderr: %q", b, err, stderr.String())
	}

	f, err = parseServeFlags([]string{"--logger", "capnslog"}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.newLogger(&bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "unknown logger option") {
		t.Errorf("--logger capnslog: %v; want etcd's unknown logger option", err)
	}
}
