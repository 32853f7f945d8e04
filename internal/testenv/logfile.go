package testenv

import (
	"bytes"
	"os"
	"strings"
)

// LogFileTail returns the last n lines of the log file at path, or a
// note saying why there is none: it goes into an error message, which
// must say something either way.
func LogFileTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	return string(bytes.Join(lines[max(0, len(lines)-n):], []byte("\n")))
}

// ExitReason is the line of a log tail that best says why a Go server
// exited: its first panic or fatal error (the runtime's own report,
// which later goroutine dumps would bury), else the last line.
func ExitReason(tail string) string {
	lines := strings.Split(tail, "\n")
	for _, l := range lines {
		if strings.HasPrefix(l, "panic:") || strings.HasPrefix(l, "fatal error:") {
			return l
		}
	}
	return lines[len(lines)-1]
}
