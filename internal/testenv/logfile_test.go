package testenv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLogFileTailAndExitReason(t *testing.T) {
	path := filepath.Join(t.TempDir(), "server.log")
	if got := LogFileTail(path, 20); !strings.HasPrefix(got, "(no log: ") {
		t.Errorf("tail of a missing log = %q", got)
	}
	log := "starting\npanic: boom\n\ngoroutine 1 [running]:\nmain.main()\n"
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := LogFileTail(path, 2); got != "goroutine 1 [running]:\nmain.main()" {
		t.Errorf("LogFileTail(2) = %q", got)
	}
	if got := ExitReason(LogFileTail(path, 20)); got != "panic: boom" {
		t.Errorf("ExitReason = %q; want the panic", got)
	}
	if got := ExitReason("a\nlast words"); got != "last words" {
		t.Errorf("ExitReason without a panic = %q; want the last line", got)
	}
}
