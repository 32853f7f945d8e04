package testenv

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// kine (github.com/k3s-io/kine, k3s's etcd shim) is a reference for kite's
// benchmarks and a source the tests copy from. It must not become a
// dependency of kite's module, so it is built from its own module by the
// go command, as a user would:
//
//	GOBIN=DIR go install github.com/k3s-io/kine@v0.17.5
//
// `go install pkg@version` builds the module exactly as its go.mod says,
// and refuses a go.mod with replace (or exclude) directives. kine v0.17.5
// has none, but a later version might: then BuildKine builds in a
// throwaway module instead (go mod init in a temporary directory, kine's
// replace directives copied with go mod edit, go get kine@version, go
// build -o). Either way the binary is cached and reused.
const (
	KineModule  = "github.com/k3s-io/kine"
	KineVersion = "v0.17.5"
)

// DefaultKineDir is where a build of kine is cached unless the caller
// says otherwise. The tests and kite-bench share it, so kine is built
// once per machine.
func DefaultKineDir() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache directory for the kine build: %w", err)
	}
	return filepath.Join(base, "kite-bench", "kine-"+KineVersion), nil
}

// BuildKine returns dir/kine, building kine KineVersion there first unless
// it is there already. The build goes to a temporary directory and is
// renamed into place, so an interrupted build never leaves a broken binary
// that a later run would reuse.
func BuildKine(ctx context.Context, log *slog.Logger, dir string) (string, error) {
	out := filepath.Join(dir, "kine")
	if st, err := os.Stat(out); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
		log.Info("using cached kine build", "binary", out, "version", KineVersion)
		return out, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("kine build directory: %w", err)
	}
	stage, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return "", fmt.Errorf("kine build directory: %w", err)
	}
	defer os.RemoveAll(stage)
	goCmd, err := goCommand()
	if err != nil {
		return "", err
	}
	log.Info("building kine (a few minutes the first time)", "module", KineModule+"@"+KineVersion, "into", out)
	start := time.Now()
	built := filepath.Join(stage, "kine")
	output, err := goRun(ctx, goCmd, stage, []string{"GOBIN=" + stage}, "install", KineModule+"@"+KineVersion)
	if err != nil {
		if !bytes.Contains(output, []byte("replace directives")) && !bytes.Contains(output, []byte("exclude directives")) {
			return "", fmt.Errorf("go install %s@%s: %w\n%s", KineModule, KineVersion, err, output)
		}
		log.Info("kine's go.mod has replace or exclude directives; building it in a throwaway module")
		if err := buildKineInModule(ctx, goCmd, stage, built); err != nil {
			return "", err
		}
	}
	if err := os.Rename(built, out); err != nil {
		return "", fmt.Errorf("install kine build: %w", err)
	}
	log.Info("built kine", "binary", out, "took", time.Since(start).Round(time.Second))
	return out, nil
}

// buildKineInModule builds kine as a dependency of a new module in
// stage/mod that carries kine's replace directives (a replace takes effect
// only in the main module).
func buildKineInModule(ctx context.Context, goCmd, stage, out string) error {
	mod := filepath.Join(stage, "mod")
	if err := os.Mkdir(mod, 0o755); err != nil {
		return err
	}
	run := func(args ...string) ([]byte, error) {
		b, err := goRun(ctx, goCmd, mod, nil, args...)
		if err != nil {
			return nil, fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, b)
		}
		return b, nil
	}
	if _, err := run("mod", "init", "kite-bench.invalid/kine-build"); err != nil {
		return err
	}
	// kine's own go.mod, fetched through the module proxy.
	dl, err := run("mod", "download", "-json", KineModule+"@"+KineVersion)
	if err != nil {
		return err
	}
	var info struct{ GoMod string }
	if err := json.Unmarshal(dl, &info); err != nil || info.GoMod == "" {
		return fmt.Errorf("go mod download %s@%s: no go.mod in %q", KineModule, KineVersion, dl)
	}
	edit, err := run("mod", "edit", "-json", info.GoMod)
	if err != nil {
		return err
	}
	var gomod struct {
		Replace []struct {
			Old, New struct{ Path, Version string }
		}
	}
	if err := json.Unmarshal(edit, &gomod); err != nil {
		return fmt.Errorf("parse kine's go.mod: %w", err)
	}
	at := func(path, version string) string {
		if version == "" {
			return path
		}
		return path + "@" + version
	}
	for _, r := range gomod.Replace {
		if r.New.Version == "" {
			// A directory inside kine's own tree: nothing a module outside it can point at.
			return fmt.Errorf("kine's go.mod replaces %s with the directory %s; build kine from a checkout and use that binary", r.Old.Path, r.New.Path)
		}
		if _, err := run("mod", "edit", "-replace", at(r.Old.Path, r.Old.Version)+"="+at(r.New.Path, r.New.Version)); err != nil {
			return err
		}
	}
	if _, err := run("get", KineModule+"@"+KineVersion); err != nil {
		return err
	}
	_, err = run("build", "-o", out, KineModule)
	return err
}

// goCommand finds the go command: $PATH, then the toolchain the caller
// was built with.
func goCommand() (string, error) {
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	p := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(p); err != nil {
		return "", errors.New("no go command on $PATH to build kine with (or use a kine binary built elsewhere)")
	}
	return p, nil
}

// goRun runs the go command in dir outside any workspace and returns its
// combined output.
func goRun(ctx context.Context, goCmd, dir string, env []string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, goCmd, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), append([]string{"GOWORK=off"}, env...)...)
	return cmd.CombinedOutput()
}

// FindKine resolves a load tool's kine: binary as given (a path or a name
// in $PATH), or when it is "" the build of KineVersion in cacheDir ("":
// DefaultKineDir), made first if it is not there. The path returned is
// absolute, so it stays valid in a child's working directory.
func FindKine(ctx context.Context, log *slog.Logger, binary, cacheDir string) (string, error) {
	if binary != "" {
		p, err := exec.LookPath(binary)
		if err != nil {
			return "", fmt.Errorf("--kine-binary %s: %w", binary, err)
		}
		return filepath.Abs(p)
	}
	if cacheDir == "" {
		var err error
		if cacheDir, err = DefaultKineDir(); err != nil {
			return "", err
		}
	}
	return BuildKine(ctx, log, cacheDir)
}
