package testutil

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type recorder struct {
	lines    []string
	cleanups []func()
}

func (r *recorder) Helper()          {}
func (r *recorder) Log(args ...any)  { r.lines = append(r.lines, args[0].(string)) }
func (r *recorder) Cleanup(f func()) { r.cleanups = append(r.cleanups, f) }

func TestLoggerWritesToTBUntilCleanup(t *testing.T) {
	t.Setenv("RAFTPS_TEST_LOG", "")
	r := &recorder{}
	log := Logger(r)
	log.Info("hidden")
	log.Warn("shown", "k", 1)
	if len(r.lines) != 1 || !strings.Contains(r.lines[0], "msg=shown k=1") || strings.HasSuffix(r.lines[0], "\n") {
		t.Fatalf("lines %q, want one warn line without its newline", r.lines)
	}
	for _, f := range r.cleanups {
		f()
	}
	log.Error("after the test")
	if len(r.lines) != 1 {
		t.Fatalf("logged after cleanup: %q", r.lines)
	}
}

func TestLoggerLevelFromEnv(t *testing.T) {
	t.Setenv("RAFTPS_TEST_LOG", "debug")
	r := &recorder{}
	Logger(r).Debug("d")
	if len(r.lines) != 1 {
		t.Fatalf("RAFTPS_TEST_LOG=debug: %q", r.lines)
	}
	t.Setenv("RAFTPS_TEST_LOG", "off")
	r = &recorder{}
	Logger(r).Error("e")
	if len(r.lines) != 0 {
		t.Fatalf("RAFTPS_TEST_LOG=off: %q", r.lines)
	}
}

func TestModuleRoot(t *testing.T) {
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("%s has no go.mod: %v", root, err)
	}
	if _, err := os.Stat(filepath.Join(root, "internal", "testing", "testutil", "testutil.go")); err != nil {
		t.Fatalf("%s is not this module's root: %v", root, err)
	}
	t.Chdir(t.TempDir())
	if _, err := ModuleRoot(); !errors.Is(err, ErrNoModule) {
		t.Fatalf("outside a module: %v, want ErrNoModule", err)
	}
}
