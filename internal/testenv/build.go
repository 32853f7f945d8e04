package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ModuleRoot is the directory of kite's main module, found from dir (a
// directory inside it or inside a module nested in it, such as test/k8s).
func ModuleRoot(dir string) (string, error) {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/kite-db/kite")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		return "", fmt.Errorf("go list -m github.com/kite-db/kite: %w\n%s", err, stderr)
	}
	return strings.TrimSpace(string(out)), nil
}

// GoBuild builds pkg, resolved in the module at root, into out, with the
// build flags given.
func GoBuild(root, out, pkg string, flags ...string) error {
	args := append(append([]string{"build"}, flags...), "-o", out, pkg)
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return nil
}

// BuildKite builds kite's server (./cmd/kite of the module at root) into
// dir/kite and returns its path. It is the one place test code builds
// kite, so a build flag every test kite needs is added here alone: the
// kitetest tag compiles in the test hooks (fault endpoints, a DNS resolver
// override, a copy pause) that a release binary does not have.
//
// With KITE_TEST_RACE=1 kite is built with the race detector: the
// end-to-end tests run kite as a process of its own, so go test -race
// would instrument only the test side. A race-built kite reports where
// GORACE says (CI sets log_path and fails on any report, since the tests
// SIGKILL kite and never see its exit status).
func BuildKite(root, dir string) (string, error) {
	bin := filepath.Join(dir, "kite")
	flags := []string{"-tags", "kitetest"}
	if os.Getenv("KITE_TEST_RACE") == "1" {
		flags = append(flags, "-race")
	}
	if err := GoBuild(root, bin, "./cmd/kite", flags...); err != nil {
		return "", err
	}
	return bin, nil
}
