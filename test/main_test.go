package test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestMain builds kite and etcdctl once for the whole test process.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "kite-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	root, err := moduleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if !againstEtcd {
		kiteBin = filepath.Join(dir, "kite")
		kiteBuildErr = goBuild(root, kiteBin, "./cmd/kite")
	}
	etcdctlBin = filepath.Join(dir, "etcdctl")
	ctlBuildE = goBuild(root, etcdctlBin, "go.etcd.io/etcd/etcdctl/v3")
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
