package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// kine is the second reference of postgres mode: k3s's etcd shim
// (github.com/k3s-io/kine), the usual way to run Kubernetes on a SQL
// database. It implements the part of the etcd API kube-apiserver uses
// (no general Txn, no serializable reads, no leases beyond TTLs); its
// servers on one database learn of each other's writes by polling the
// table (--datastore-poll-interval, 1 s by default).
//
// How it is built: kine must not become a dependency of kite's module, so
// it is built from its own module by the go command, as a user would:
//
//	GOBIN=DIR go install github.com/k3s-io/kine@v0.17.5
//
// `go install pkg@version` builds the module exactly as its go.mod says,
// and refuses a go.mod with replace (or exclude) directives. kine v0.17.5
// has none, but a later version might: then buildKine builds in a
// throwaway module instead (go mod init in a temporary directory, kine's
// replace directives copied with go mod edit, go get kine@version, go
// build -o). Either way the binary is cached (--kine-cache) and reused.
const (
	kineModule  = "github.com/k3s-io/kine"
	kineVersion = "v0.17.5"
	// kineAuto as --kine-binary builds kine (or reuses the cached build).
	kineAuto = "auto"
	// buildKineCommand is the subcommand that only builds kine.
	buildKineCommand = "build-kine"
)

// kineKind runs kine on the database whose URL is put in KINE_ENDPOINT
// (kine reads its --endpoint from there; the URL never shows in a process
// listing), serving etcd clients on the loopback URL it is given. Its
// metrics server, by default on every interface's port 8080, is switched
// off: two kine servers would collide on it.
func kineKind(path string, servers int) serverKind {
	return serverKind{
		name:    "kine",
		servers: servers,
		dbEnv:   "KINE_ENDPOINT",
		partial: true,
		argv: func(m member) []string {
			return []string{path, "--listen-address", hostPort(m.clientURL), "--metrics-bind-address", "0"}
		},
	}
}

// hostPort is the host:port of a client URL.
func hostPort(clientURL string) string {
	if u, err := url.Parse(clientURL); err == nil && u.Host != "" {
		return u.Host
	}
	return clientURL
}

// resolveKine returns the kine binary --kine-binary names, building it for
// kineAuto.
func resolveKine(ctx context.Context, cfg *config, log *slog.Logger) (string, error) {
	if cfg.kineBinary != kineAuto {
		p, err := exec.LookPath(cfg.kineBinary)
		if err != nil {
			return "", fmt.Errorf("--kine-binary %s: %w", cfg.kineBinary, err)
		}
		return filepath.Abs(p)
	}
	dir := cfg.kineCacheDir
	if dir == "" {
		var err error
		if dir, err = defaultKineDir(); err != nil {
			return "", err
		}
	}
	return buildKine(ctx, log, dir)
}

// defaultKineDir is where an automatic build of kine is kept.
func defaultKineDir() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache directory for the kine build (give --kine-cache): %w", err)
	}
	return filepath.Join(base, "kite-bench", "kine-"+kineVersion), nil
}

// buildKine returns dir/kine, building kine kineVersion there first unless
// it is there already. The build goes to a temporary directory and is
// renamed into place, so an interrupted build never leaves a broken binary
// that a later run would reuse.
func buildKine(ctx context.Context, log *slog.Logger, dir string) (string, error) {
	out := filepath.Join(dir, "kine")
	if st, err := os.Stat(out); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
		log.Info("using cached kine build", "binary", out, "version", kineVersion)
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
	log.Info("building kine (a few minutes the first time)", "module", kineModule+"@"+kineVersion, "into", out)
	start := time.Now()
	built := filepath.Join(stage, "kine")
	output, err := goRun(ctx, goCmd, stage, []string{"GOBIN=" + stage}, "install", kineModule+"@"+kineVersion)
	if err != nil {
		if !bytes.Contains(output, []byte("replace directives")) && !bytes.Contains(output, []byte("exclude directives")) {
			return "", fmt.Errorf("go install %s@%s: %w\n%s", kineModule, kineVersion, err, output)
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
	dl, err := run("mod", "download", "-json", kineModule+"@"+kineVersion)
	if err != nil {
		return err
	}
	var info struct{ GoMod string }
	if err := json.Unmarshal(dl, &info); err != nil || info.GoMod == "" {
		return fmt.Errorf("go mod download %s@%s: no go.mod in %q", kineModule, kineVersion, dl)
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
			return fmt.Errorf("kine's go.mod replaces %s with the directory %s; build kine from a checkout and pass --kine-binary", r.Old.Path, r.New.Path)
		}
		if _, err := run("mod", "edit", "-replace", at(r.Old.Path, r.Old.Version)+"="+at(r.New.Path, r.New.Version)); err != nil {
			return err
		}
	}
	if _, err := run("get", kineModule+"@"+kineVersion); err != nil {
		return err
	}
	_, err = run("build", "-o", out, kineModule)
	return err
}

// goCommand finds the go command: $PATH, then the toolchain kite-bench was
// built with.
func goCommand() (string, error) {
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	p := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(p); err != nil {
		return "", errors.New("no go command on $PATH to build kine with (or pass a kine binary: --kine-binary PATH)")
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

// runBuildKine is `kite-bench build-kine [--dir D]`: build kine (or find
// the cached build) and print the binary's path.
func runBuildKine(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(buildKineCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "directory of the build (default: $XDG_CACHE_HOME/kite-bench/kine-"+kineVersion+")")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *dir == "" {
		d, err := defaultKineDir()
		if err != nil {
			fmt.Fprintf(stderr, "kite-bench %s: %v\n", buildKineCommand, err)
			return 1
		}
		*dir = d
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	p, err := buildKine(context.Background(), log, *dir)
	if err != nil {
		fmt.Fprintf(stderr, "kite-bench %s: %v\n", buildKineCommand, err)
		return 1
	}
	fmt.Fprintln(stdout, p)
	return 0
}
