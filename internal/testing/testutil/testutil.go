package testutil

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// TB is the part of testing.TB the helpers use.
type TB interface {
	Helper()
	Log(args ...any)
	Cleanup(func())
}

// Logger returns a text slog.Logger at Warn that writes to tb's log.
// RAFTPS_TEST_LOG=debug|info|warn|error changes the level for every test
// (off discards). Lines logged after the test ended (by goroutines that
// outlive it) are dropped, not reported as a misuse of tb.
func Logger(tb TB) *slog.Logger { return LoggerLevel(tb, slog.LevelWarn) }

// LoggerLevel is Logger at level (unless RAFTPS_TEST_LOG says otherwise).
func LoggerLevel(tb TB, level slog.Level) *slog.Logger {
	switch v := os.Getenv("RAFTPS_TEST_LOG"); v {
	case "":
	case "off":
		return slog.New(slog.DiscardHandler)
	default:
		_ = level.UnmarshalText([]byte(v))
	}
	w := &tbWriter{tb: tb}
	tb.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

type tbWriter struct {
	tb   TB
	mu   sync.Mutex
	done bool
}

func (w *tbWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.tb.Helper()
		w.tb.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

// ErrNoModule: no go.mod above the working directory.
var ErrNoModule = errors.New("no go.mod above the working directory")

// ModuleRoot walks up from the working directory to the directory holding
// go.mod (a package's tests run in the package's directory).
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", ErrNoModule
		}
		dir = parent
	}
}

// LockedBuffer is a bytes.Buffer safe for a logger writing and a test
// reading at once (a test that checks what a component logged).
type LockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
