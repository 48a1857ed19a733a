package gossip

import (
	"bytes"
	"context"
	"log"
	"log/slog"
)

// logWriter adapts memberlist's *log.Logger output ("[LEVEL] memberlist: msg")
// to slog, mapping the bracketed level to a slog level.
type logWriter struct{ l *slog.Logger }

func newMemberlistLogger(l *slog.Logger) *log.Logger {
	return log.New(logWriter{l}, "", 0)
}

var levelPrefixes = []struct {
	prefix []byte
	level  slog.Level
}{
	{[]byte("[DEBUG]"), slog.LevelDebug},
	{[]byte("[INFO]"), slog.LevelInfo},
	{[]byte("[WARN]"), slog.LevelWarn},
	{[]byte("[ERR]"), slog.LevelError},
	{[]byte("[ERROR]"), slog.LevelError},
}

func (w logWriter) Write(p []byte) (int, error) {
	n := len(p)
	line := bytes.TrimSpace(p)
	level := slog.LevelInfo
	for _, lp := range levelPrefixes {
		if bytes.HasPrefix(line, lp.prefix) {
			level = lp.level
			line = bytes.TrimSpace(line[len(lp.prefix):])
			break
		}
	}
	line = bytes.TrimPrefix(line, []byte("memberlist: "))
	if level > slog.LevelDebug && bytes.Contains(line, []byte("use of closed network connection")) {
		level = slog.LevelDebug // sends racing our own Shutdown: expected, not an error
	}
	ctx := context.Background()
	if w.l.Enabled(ctx, level) {
		w.l.Log(ctx, level, string(line), "lib", "memberlist")
	}
	return n, nil
}
