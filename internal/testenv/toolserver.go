package testenv

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// stopGrace is how long a tool's server is given to exit after SIGTERM.
const stopGrace = 15 * time.Second

// ToolServer is a server process that a load tool (kite-bench, kite-soak)
// runs: one process in a temporary directory of its own that holds its
// data directory and its log, started again on the same data after a
// kill if the tool wants, and removed by Stop. The tools differ in what
// they watch of it (memory, restarts, exits), not in how it is run.
type ToolServer struct {
	Name     string
	Endpoint string // http://127.0.0.1:port
	Dir      string // the temporary directory: DataDir and the log
	LogPath  string
	Argv     []string
	Env      []string // added to the environment
	// Secret (a password) is masked in LogTail.
	Secret string

	log  *slog.Logger
	proc *Process // nil until started
	// starts counts Start's successes: after a restart the kernel's peak
	// memory (VmHWM) covers only the time since.
	starts int
	// exitLogged: the end of the log of an unexpected exit was logged
	// (LoggedExitErr), so Halt need not log it again.
	exitLogged bool
	// rssSeen is the largest VmRSS read since the last start (sample.go);
	// atomic, as a tool may sample from a goroutine of its own.
	rssSeen atomic.Int64
}

// NewToolServer makes the temporary directory (under workDir, "" for the
// system's) of a server that will serve clients on the loopback port; it
// starts nothing.
func NewToolServer(log *slog.Logger, workDir, prefix, name string, port int) (*ToolServer, error) {
	dir, err := os.MkdirTemp(workDir, prefix+name+"-")
	if err != nil {
		return nil, fmt.Errorf("create data dir for %s: %w", name, err)
	}
	return &ToolServer{
		Name:     name,
		Endpoint: "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		Dir:      dir,
		LogPath:  filepath.Join(dir, "server.log"),
		log:      log,
	}, nil
}

// DataDir is the server's data directory, beside its log.
func (s *ToolServer) DataDir() string { return filepath.Join(s.Dir, "data") }

// Start starts the process (again, after an exit) with a fresh log; it
// does not wait for it to answer. The process dies with the tool (Start),
// so no orphan keeps a port or burns the shared CPUs.
func (s *ToolServer) Start() error {
	logFile, err := os.Create(s.LogPath)
	if err != nil {
		return fmt.Errorf("create log of %s: %w", s.Name, err)
	}
	// The child has its own descriptor of the log.
	defer logFile.Close()
	proc, err := Start(Command{Argv: s.Argv, Env: s.Env, Out: logFile})
	if err != nil {
		return fmt.Errorf("start %s: %w", s.Name, err)
	}
	s.proc = proc
	s.starts++
	s.exitLogged = false
	s.rssSeen.Store(0)
	s.log.Info("started server", "server", s.Name, "pid", proc.Pid(), "endpoint", s.Endpoint, "dir", s.Dir)
	return nil
}

// WaitReady waits until the server answers, its process exits, or
// timeout passes; the error carries the end of its log.
func (s *ToolServer) WaitReady(ctx context.Context, timeout time.Duration) error {
	if err := WaitReady(ctx, s.Endpoint, s.proc, timeout); err != nil {
		return fmt.Errorf("%s %w; its log ends:\n%s", s.Name, err, s.LogTail())
	}
	return nil
}

// Launch is Start and WaitReady.
func (s *ToolServer) Launch(ctx context.Context, timeout time.Duration) error {
	if err := s.Start(); err != nil {
		return err
	}
	return s.WaitReady(ctx, timeout)
}

// Starts is how many times the server was started.
func (s *ToolServer) Starts() int { return s.starts }

// Process is the running (or last) process, nil before the first Start.
func (s *ToolServer) Process() *Process { return s.proc }

// Exited is closed once the process has exited; before a Start it is
// closed already (there is nothing to wait for).
func (s *ToolServer) Exited() <-chan struct{} {
	if s.proc == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return s.proc.Exited()
}

// Err is how the process exited (valid once Exited is closed), nil before
// a Start.
func (s *ToolServer) Err() error {
	if s.proc == nil {
		return nil
	}
	return s.proc.Err()
}

// ExitErr says why the server is no longer running, with the line of its
// log that best says why (ExitReason), or is nil while it runs.
func (s *ToolServer) ExitErr() error {
	select {
	case <-s.Exited():
	default:
		return nil
	}
	return fmt.Errorf("%s exited (%v): %s", s.Name, s.Err(), ExitReason(s.LogTail()))
}

// LoggedExitErr is ExitErr, and the first time it is not nil for this
// start the end of the server's log is logged: a crash under load is a
// finding, and its log is gone with the directory.
func (s *ToolServer) LoggedExitErr() error {
	err := s.ExitErr()
	if err != nil && !s.exitLogged {
		s.exitLogged = true
		s.log.Error("server exited", "server", s.Name, "error", s.Err(), "log", s.LogTail())
	}
	return err
}

// Kill ends the server abruptly (SIGKILL: no shutdown code runs, as in a
// crash or a power cut) and waits until it has exited. Its directory
// stays, so it can be started again on the same data.
func (s *ToolServer) Kill() {
	if s.proc != nil {
		s.proc.Kill()
	}
}

// Stop halts the server and removes its directory.
func (s *ToolServer) Stop() {
	s.Halt()
	s.Remove()
}

// Halt asks the server to shut down (SIGTERM) and kills it after 15 s.
// An unclean exit is logged with the log's tail (unless LoggedExitErr
// logged it already), since a crash under load is a finding, not noise.
func (s *ToolServer) Halt() {
	if s.proc == nil {
		return
	}
	if s.proc.Stop(stopGrace) {
		s.log.Warn("server ignored SIGTERM; killed it", "server", s.Name, "grace", stopGrace)
	}
	// Err is nil for status 0 alone: a signal or any other status is an
	// unclean exit.
	if err := s.proc.Err(); err != nil && !s.exitLogged {
		s.log.Warn("server exited uncleanly", "server", s.Name, "error", err, "log", s.LogTail())
	}
}

// Remove deletes the server's directory, data and log.
func (s *ToolServer) Remove() {
	if err := os.RemoveAll(s.Dir); err != nil {
		s.log.Warn("remove server dir", "dir", s.Dir, "error", err)
	}
}

// LogTail returns the last lines of the server's log, Secret masked.
func (s *ToolServer) LogTail() string {
	tail := LogFileTail(s.LogPath, 20)
	if s.Secret != "" {
		tail = strings.ReplaceAll(tail, s.Secret, "xxxxx")
	}
	return tail
}
