package raftsql

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// etcd's WAL, snapshot and transport packages log through zap and raft
// through its own Logger interface; both are sent to kite's slog logger so
// that one log holds everything, in one format.

// newZapLogger returns a zap.Logger whose entries go to log.
func newZapLogger(log *slog.Logger) *zap.Logger {
	return zap.New(&slogCore{log: log})
}

type slogCore struct {
	log    *slog.Logger
	fields []zapcore.Field
}

func (c *slogCore) Enabled(l zapcore.Level) bool {
	return c.log.Enabled(context.Background(), slogLevel(l))
}

func (c *slogCore) With(fs []zapcore.Field) zapcore.Core {
	return &slogCore{log: c.log, fields: append(append([]zapcore.Field{}, c.fields...), fs...)}
}

func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *slogCore) Write(e zapcore.Entry, fs []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range append(append([]zapcore.Field{}, c.fields...), fs...) {
		f.AddTo(enc)
	}
	attrs := make([]any, 0, 2*len(enc.Fields))
	for k, v := range enc.Fields {
		attrs = append(attrs, k, v)
	}
	c.log.Log(context.Background(), slogLevel(e.Level), e.Message, attrs...)
	return nil
}

func (c *slogCore) Sync() error { return nil }

func slogLevel(l zapcore.Level) slog.Level {
	switch {
	case l >= zapcore.ErrorLevel:
		return slog.LevelError
	case l >= zapcore.WarnLevel:
		return slog.LevelWarn
	case l >= zapcore.InfoLevel:
		return slog.LevelInfo
	}
	return slog.LevelDebug
}

// raftLogger is raft's Logger over slog. Raft's Fatal and Panic mean its
// invariants broke: the process stops, as etcd's does.
type raftLogger struct{ log *slog.Logger }

func (l raftLogger) Debug(v ...any)                 { l.log.Debug(fmt.Sprint(v...)) }
func (l raftLogger) Debugf(format string, v ...any) { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l raftLogger) Info(v ...any)                  { l.log.Info(fmt.Sprint(v...)) }
func (l raftLogger) Infof(format string, v ...any)  { l.log.Info(fmt.Sprintf(format, v...)) }
func (l raftLogger) Warning(v ...any)               { l.log.Warn(fmt.Sprint(v...)) }
func (l raftLogger) Warningf(format string, v ...any) {
	l.log.Warn(fmt.Sprintf(format, v...))
}
func (l raftLogger) Error(v ...any)                 { l.log.Error(fmt.Sprint(v...)) }
func (l raftLogger) Errorf(format string, v ...any) { l.log.Error(fmt.Sprintf(format, v...)) }
func (l raftLogger) Fatal(v ...any) {
	l.log.Error(fmt.Sprint(v...))
	os.Exit(1)
}
func (l raftLogger) Fatalf(format string, v ...any) {
	l.log.Error(fmt.Sprintf(format, v...))
	os.Exit(1)
}
func (l raftLogger) Panic(v ...any)                 { panic(fmt.Sprint(v...)) }
func (l raftLogger) Panicf(format string, v ...any) { panic(fmt.Sprintf(format, v...)) }
