package testenv

import (
	"flag"
	"io"
	"log/slog"
	"testing"
	"time"
)

func TestToolFlags(t *testing.T) {
	var f ToolFlags
	fs := flag.NewFlagSet("tool", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f.Register(fs, "kite", "dirs")
	if err := fs.Parse([]string{"--kite-binary", "/k", "--op-timeout", "2s", "--log-level", "warn"}); err != nil {
		t.Fatal(err)
	}
	level, err := f.LogLevel()
	if err != nil || level != slog.LevelWarn {
		t.Errorf("LogLevel = %v, %v; want warn", level, err)
	}
	if f.KiteBinary != "/k" || f.OpTimeout != 2*time.Second || f.StartupWait != 60*time.Second || f.WorkDir != "" {
		t.Errorf("flags %+v", f)
	}
	f.logLevel = "loud"
	if _, err := f.LogLevel(); err == nil {
		t.Error("LogLevel accepted \"loud\"")
	}
}
