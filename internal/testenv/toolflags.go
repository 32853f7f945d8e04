package testenv

import (
	"flag"
	"fmt"
	"log/slog"
	"time"
)

// ToolFlags are the flags kite's load tools (kite-bench, kite-soak) share:
// which kite they start, where the servers' data goes, how long a server
// may take to start and a request to answer, and how much they log. One
// definition keeps their names, defaults and meaning the same in both.
type ToolFlags struct {
	KiteBinary  string        // --kite-binary; "" lets FindKite look
	WorkDir     string        // --work-dir; "" is $TMPDIR
	StartupWait time.Duration // --startup-timeout
	OpTimeout   time.Duration // --op-timeout
	logLevel    string        // --log-level, parsed by LogLevel
}

// Register defines the flags on fs. kiteBinaryHelp and workDirHelp are
// their usage texts, which differ by tool (what stands in for kite, what
// the directories are for); the others read the same everywhere.
func (f *ToolFlags) Register(fs *flag.FlagSet, kiteBinaryHelp, workDirHelp string) {
	fs.StringVar(&f.KiteBinary, "kite-binary", "", kiteBinaryHelp)
	fs.StringVar(&f.WorkDir, "work-dir", "", workDirHelp)
	fs.DurationVar(&f.StartupWait, "startup-timeout", 60*time.Second, "how long a started server may take to answer")
	fs.DurationVar(&f.OpTimeout, "op-timeout", 30*time.Second, "deadline of a single request")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
}

// LogLevel is --log-level's level; call it after the flags are parsed.
func (f *ToolFlags) LogLevel() (slog.Level, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return 0, fmt.Errorf("--log-level: %w", err)
	}
	return level, nil
}
