package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// FindKite resolves a load tool's --kite-binary: binary as given (a path
// or a name in $PATH), or when it is "" kite next to the running
// executable, then kite in $PATH. The path returned is absolute, so it
// stays valid in a child's working directory.
func FindKite(binary string) (string, error) {
	if binary != "" {
		p, err := exec.LookPath(binary)
		if err != nil {
			return "", fmt.Errorf("--kite-binary %s: %w", binary, err)
		}
		return filepath.Abs(p)
	}
	tool := "this tool"
	if self, err := os.Executable(); err == nil {
		tool = filepath.Base(self)
		p := filepath.Join(filepath.Dir(self), "kite")
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	p, err := exec.LookPath("kite")
	if err != nil {
		return "", fmt.Errorf("no kite binary next to %s or in $PATH (build one: go build -o /tmp/kite ./cmd/kite, then --kite-binary /tmp/kite): %w", tool, err)
	}
	return filepath.Abs(p)
}
