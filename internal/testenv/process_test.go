package testenv

import (
	"strings"
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
