package testenv

import (
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestProcessStopAndLog(t *testing.T) {
	var log LogBuffer
	p, err := Start(Command{Argv: []string{"sh", "-c", "echo started; exec sleep 30"}, Out: &log})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(log.String(), "started") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if killed := p.Stop(5 * time.Second); killed {
		t.Error("sleep ignored SIGTERM")
	}
	select {
	case <-p.Exited():
	default:
		t.Fatal("Exited not closed after Stop")
	}
	if p.Err() == nil {
		t.Error("a process ended by SIGTERM reports no error")
	}
	if got := log.Tail(8); got != "started\n" {
		t.Errorf("Tail(8) = %q", got)
	}
}

func TestProcessNoteExitAndState(t *testing.T) {
	var log LogBuffer
	p, err := Start(Command{Argv: []string{"sh", "-c", "echo bye; exit 3"}, Out: &log, NoteExit: true})
	if err != nil {
		t.Fatal(err)
	}
	if code := p.State().ExitCode(); code != 3 {
		t.Errorf("exit code %d; want 3", code)
	}
	// The note is written before Exited is closed, so it is there now.
	if got := log.String(); !strings.HasPrefix(got, "bye\n----- exited at ") || !strings.HasSuffix(got, ": exit status 3 -----\n") {
		t.Errorf("log %q", got)
	}
	if err := p.Signal(syscall.SIGCONT); !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("Signal after exit = %v; want os.ErrProcessDone", err)
	}
}

func TestProcessSignalStopCont(t *testing.T) {
	p, err := Start(Command{Argv: []string{"sleep", "30"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := p.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
}
