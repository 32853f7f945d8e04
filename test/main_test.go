package test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/kite-db/kite/internal/testenv"
)

// TestMain builds kite and etcdctl once for the whole test process.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "kite-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	root, err := testenv.ModuleRoot(".")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if !againstEtcd {
		kiteBin, kiteBuildErr = testenv.BuildKite(root, dir)
	}
	etcdctlBin = filepath.Join(dir, "etcdctl")
	ctlBuildE = testenv.GoBuild(root, etcdctlBin, "go.etcd.io/etcd/etcdctl/v3")
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
