package raftstore

import (
	"context"
	"io"
	"log"
	"log/slog"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// hcLogger adapts a *slog.Logger to the hclog.Logger that hashicorp/raft
// and its transport expect. Levels map Trace→Debug-4, Debug, Info, Warn,
// Error; the level filter is slog's handler's.
type hcLogger struct {
	l       *slog.Logger
	name    string
	implied []any
}

var _ hclog.Logger = (*hcLogger)(nil)

func newHCLogger(l *slog.Logger, name string) *hcLogger { return &hcLogger{l: l, name: name} }

func slogLevel(level hclog.Level) slog.Level {
	switch level {
	case hclog.Trace:
		return slog.LevelDebug - 4
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

func (h *hcLogger) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.Off {
		return
	}
	h.l.Log(context.Background(), slogLevel(level), msg, args...)
}
func (h *hcLogger) Trace(msg string, args ...any) { h.Log(hclog.Trace, msg, args...) }
func (h *hcLogger) Debug(msg string, args ...any) { h.Log(hclog.Debug, msg, args...) }
func (h *hcLogger) Info(msg string, args ...any)  { h.Log(hclog.Info, msg, args...) }
func (h *hcLogger) Warn(msg string, args ...any)  { h.Log(hclog.Warn, msg, args...) }
func (h *hcLogger) Error(msg string, args ...any) { h.Log(hclog.Error, msg, args...) }
func (h *hcLogger) enabled(l hclog.Level) bool {
	return h.l.Enabled(context.Background(), slogLevel(l))
}
func (h *hcLogger) IsTrace() bool        { return h.enabled(hclog.Trace) }
func (h *hcLogger) IsDebug() bool        { return h.enabled(hclog.Debug) }
func (h *hcLogger) IsInfo() bool         { return h.enabled(hclog.Info) }
func (h *hcLogger) IsWarn() bool         { return h.enabled(hclog.Warn) }
func (h *hcLogger) IsError() bool        { return h.enabled(hclog.Error) }
func (h *hcLogger) ImpliedArgs() []any   { return h.implied }
func (h *hcLogger) Name() string         { return h.name }
func (h *hcLogger) SetLevel(hclog.Level) {}
func (h *hcLogger) GetLevel() hclog.Level {
	for _, l := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Info, hclog.Warn} {
		if h.enabled(l) {
			return l
		}
	}
	return hclog.Error
}
func (h *hcLogger) With(args ...any) hclog.Logger {
	return &hcLogger{l: h.l.With(args...), name: h.name, implied: append(append([]any(nil), h.implied...), args...)}
}
func (h *hcLogger) Named(name string) hclog.Logger {
	n := name
	if h.name != "" {
		n = h.name + "." + name
	}
	return &hcLogger{l: h.l.With("logger", n), name: n, implied: h.implied}
}
func (h *hcLogger) ResetNamed(name string) hclog.Logger {
	return &hcLogger{l: h.l.With("logger", name), name: name, implied: h.implied}
}
func (h *hcLogger) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(h.StandardWriter(opts), "", 0)
}
func (h *hcLogger) StandardWriter(*hclog.StandardLoggerOptions) io.Writer { return stdWriter{h} }

// stdWriter turns standard-library log lines ("[WARN] raft: ...") into records.
type stdWriter struct{ h *hcLogger }

func (w stdWriter) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	level := hclog.Info
	for _, c := range []struct {
		tag string
		l   hclog.Level
	}{{"[TRACE]", hclog.Trace}, {"[DEBUG]", hclog.Debug}, {"[INFO]", hclog.Info}, {"[WARN]", hclog.Warn}, {"[ERR]", hclog.Error}, {"[ERROR]", hclog.Error}} {
		if strings.HasPrefix(msg, c.tag) {
			level, msg = c.l, strings.TrimSpace(strings.TrimPrefix(msg, c.tag))
			break
		}
	}
	w.h.Log(level, msg)
	return len(p), nil
}
