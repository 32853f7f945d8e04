package testenv

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Process is a server running as a child process. It dies with its
// parent (Pdeathsig): a test process that is killed, or a tool that
// crashes, leaves no orphan holding a port or burning the shared CPUs.
type Process struct {
	cmd    *exec.Cmd
	exited chan struct{}
	err    error // valid once exited is closed
}

// exitNoteTime is the clock format of the line NoteExit writes: the
// time of day to the millisecond, to be set beside the server's own
// timestamps.
const exitNoteTime = "15:04:05.000"

// Command says how to start a Process.
type Command struct {
	Argv []string
	Env  []string // added to this process's environment
	Dir  string   // working directory; "" is this process's
	// Out receives the child's stdout and stderr; it is written from the
	// os/exec copying goroutines, so it must be safe for that (a
	// *LogBuffer or an *os.File).
	Out io.Writer
	// NoteExit writes a line to Out saying when and how the child
	// exited, before Exited is closed: a server that dies on its own is
	// then seen in its log, after the last thing it wrote.
	NoteExit bool
}

// Start starts c. The goroutine that waits for the child ends when the
// child exits, which Kill and Stop ensure.
func Start(c Command) (*Process, error) {
	if len(c.Argv) == 0 {
		return nil, fmt.Errorf("start: empty command line")
	}
	cmd := exec.Command(c.Argv[0], c.Argv[1:]...)
	cmd.Dir = c.Dir
	if len(c.Env) > 0 {
		cmd.Env = append(os.Environ(), c.Env...)
	}
	cmd.Stdout, cmd.Stderr = c.Out, c.Out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", c.Argv[0], err)
	}
	p := &Process{cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		if c.NoteExit && c.Out != nil {
			fmt.Fprintf(c.Out, "----- exited at %s: %v -----\n", time.Now().UTC().Format(exitNoteTime), cmd.ProcessState)
		}
		close(p.exited)
	}()
	return p, nil
}

// Exited is closed once the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Err is how the process exited (nil: status 0); valid once Exited is
// closed.
func (p *Process) Err() error {
	<-p.exited
	return p.err
}

// State is how the process exited (its exit code, or the signal that
// ended it); it waits until the process has exited.
func (p *Process) State() *os.ProcessState {
	<-p.exited
	return p.cmd.ProcessState
}

// Pid is the process's id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Kill ends the process abruptly (SIGKILL: no shutdown code runs, as in a
// crash) and waits until it has exited.
func (p *Process) Kill() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// Signal sends sig to the process: SIGSTOP and SIGCONT freeze and resume
// it, which Kill and Stop do not. Signalling a process that has exited is
// an error (os.ErrProcessDone).
func (p *Process) Signal(sig os.Signal) error {
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal %v to pid %d: %w", sig, p.Pid(), err)
	}
	return nil
}

// Stop asks the process to shut down (SIGTERM), kills it after grace, and
// waits until it has exited. It reports whether grace ran out.
func (p *Process) Stop(grace time.Duration) (killed bool) {
	select {
	case <-p.exited:
		return false
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.exited:
		return false
	case <-t.C:
		p.Kill()
		return true
	}
}

// LogBuffer collects a child's output in memory.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is everything written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Len is the number of bytes written so far.
func (l *LogBuffer) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Len()
}

// Tail is the last n bytes written.
func (l *LogBuffer) Tail(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.b.Bytes()
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
