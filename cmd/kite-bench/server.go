package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// serverProc is a server process this run started: the reference etcd or
// kite, each in its own temporary directory (data and log).
type serverProc struct {
	name     string
	endpoint string
	dir      string
	logPath  string
	cmd      *exec.Cmd
	exited   chan struct{} // closed when the process has exited
	waitErr  error         // valid after exited is closed
	log      *slog.Logger
}

// serverKind says how to start one kind of server on a data dir and URL.
type serverKind struct {
	name string
	argv func(dataDir, clientURL string) []string
}

// etcdKind re-executes this binary's hidden etcd-server subcommand.
func etcdKind(name string) (serverKind, error) {
	self, err := os.Executable()
	if err != nil {
		return serverKind{}, fmt.Errorf("find own executable for the reference etcd: %w", err)
	}
	return serverKind{name: name, argv: func(dir, u string) []string {
		return []string{self, etcdServerCommand, "--name", name, "--data-dir", dir, "--listen", u}
	}}, nil
}

// kiteKind runs the kite binary with the flags issue 4 fixes. binary "etcd"
// stands a second reference etcd in for kite, which proves the tool on
// etcd-vs-etcd (every ratio should then be near 1).
func kiteKind(binary string) (serverKind, error) {
	if binary == "etcd" {
		return etcdKind("kite")
	}
	path, err := findKite(binary)
	if err != nil {
		return serverKind{}, err
	}
	return serverKind{name: "kite", argv: func(dir, u string) []string {
		return []string{path, "--name", "kite-bench", "--data-dir", dir,
			"--listen-client-urls", u, "--advertise-client-urls", u, "--log-level", "warn"}
	}}, nil
}

// findKite resolves --kite-binary, or looks for kite next to kite-bench and
// then in $PATH.
func findKite(binary string) (string, error) {
	if binary != "" {
		p, err := exec.LookPath(binary)
		if err != nil {
			return "", fmt.Errorf("--kite-binary %s: %w", binary, err)
		}
		return filepath.Abs(p)
	}
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), "kite")
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	p, err := exec.LookPath("kite")
	if err != nil {
		return "", fmt.Errorf("no kite binary next to kite-bench or in $PATH (build one: go build -o /tmp/kite ./cmd/kite, then --kite-binary /tmp/kite): %w", err)
	}
	return filepath.Abs(p)
}

// startServer starts kind on a fresh temporary data dir and a free
// loopback port, and waits until it answers.
func startServer(ctx context.Context, cfg *config, log *slog.Logger, kind serverKind) (*serverProc, error) {
	dir, err := os.MkdirTemp(cfg.workDir, "kite-bench-"+kind.name+"-")
	if err != nil {
		return nil, fmt.Errorf("create data dir for %s: %w", kind.name, err)
	}
	port, err := freePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	p := &serverProc{
		name:     kind.name,
		endpoint: "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		dir:      dir,
		logPath:  filepath.Join(dir, "server.log"),
		exited:   make(chan struct{}),
		log:      log,
	}
	logFile, err := os.Create(p.logPath)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("create log of %s: %w", kind.name, err)
	}
	argv := kind.argv(filepath.Join(dir, "data"), p.endpoint)
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	// If kite-bench dies without stopping its servers, the kernel kills
	// them, so no orphan keeps a port or burns the shared CPUs.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		logFile.Close()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start %s (%s): %w", kind.name, argv[0], err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		logFile.Close()
		close(p.exited)
	}()
	log.Info("started server", "server", kind.name, "pid", p.cmd.Process.Pid, "endpoint", p.endpoint, "dir", dir)
	if err := p.waitReady(ctx, cfg.startupWait); err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

// waitReady polls Status until the server answers, the process exits, or
// timeout passes.
func (p *serverProc) waitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// A nop logger: clientv3 would log every refused dial while the server boots.
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{p.endpoint}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		return fmt.Errorf("client for %s: %w", p.name, err)
	}
	defer cli.Close()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		attempt, attemptCancel := context.WithTimeout(ctx, time.Second)
		_, err := cli.Status(attempt, p.endpoint)
		attemptCancel()
		if err == nil {
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("%s exited while starting (%v); its log ends:\n%s", p.name, p.waitErr, p.logTail())
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after %s (last error: %w); its log ends:\n%s", p.name, timeout, err, p.logTail())
		case <-tick.C:
		}
	}
}

// rss returns the process's resident memory (VmRSS) in bytes.
func (p *serverProc) rss() (int64, error) {
	return readRSS(p.cmd.Process.Pid)
}

func readRSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("read memory of pid %d: %w", pid, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parse VmRSS %q: %w", rest, err)
			}
			return kb * 1024, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("read memory of pid %d: %w", pid, err)
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", pid)
}

// stop asks the server to shut down (SIGTERM), kills it after 15 s, and
// removes its directory. An unclean exit is logged with the log's tail,
// since a crash under load is a finding, not noise.
func (p *serverProc) stop() {
	select {
	case <-p.exited:
	default:
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(15 * time.Second):
			p.log.Warn("server ignored SIGTERM for 15s; killing it", "server", p.name)
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	}
	if p.waitErr != nil {
		var exitErr *exec.ExitError
		if !errors.As(p.waitErr, &exitErr) || exitErr.ExitCode() != 0 {
			p.log.Warn("server exited uncleanly", "server", p.name, "error", p.waitErr, "log", p.logTail())
		}
	}
	if err := os.RemoveAll(p.dir); err != nil {
		p.log.Warn("remove server dir", "dir", p.dir, "error", err)
	}
}

// logTail returns the last lines of the server's log.
func (p *serverProc) logTail() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	return string(bytes.Join(lines[max(0, len(lines)-20):], []byte("\n")))
}

// checkLoopback refuses endpoints off this machine: a benchmark generates
// enough load to hurt a server someone depends on.
func checkLoopback(endpoint string) error {
	host := endpoint
	if u, err := url.Parse(endpoint); err == nil && u.Host != "" {
		host = u.Host
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("endpoint %q is not a loopback address; kite-bench only loads this machine", endpoint)
}
