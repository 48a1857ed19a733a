package main

import (
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/raftps/raftps/cmd/raftps/offline"
)

// TestExportFileMode (issue 32, hole 9): `checkpoint export` writes its
// file 0600 by default, whatever the umask, also over an existing 0644
// file; --mode gives other bits; a bad --mode is refused.
func TestExportFileMode(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := t.TempDir()
	def, err := offline.ParseFileMode(newCheckpointExportModeDefault(t))
	if err != nil {
		t.Fatal(err)
	}
	existing := filepath.Join(dir, "old.rpsx")
	if err := os.WriteFile(existing, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		perm os.FileMode
		want os.FileMode
	}{
		{"new.rpsx", def, 0o600},
		{"old.rpsx", def, 0o600},
		{"shared.rpsx", 0o640, 0o640},
	} {
		if err := offline.WriteFileAtomicMode(filepath.Join(dir, tc.name), tc.perm, func(w io.Writer) error {
			_, err := w.Write([]byte("params"))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(filepath.Join(dir, tc.name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != tc.want {
			t.Errorf("%s: mode %v, want %v", tc.name, fi.Mode().Perm(), tc.want)
		}
	}
	for _, bad := range []string{"rw", "0999", "1777", ""} {
		if _, err := offline.ParseFileMode(bad); err == nil {
			t.Errorf("--mode %q accepted", bad)
		}
	}
}

// newCheckpointExportModeDefault is the default of `checkpoint export
// --mode`, read from the command's flags.
func newCheckpointExportModeDefault(t *testing.T) string {
	t.Helper()
	root := newRootCmd(io.Discard, io.Discard)
	cmd, _, err := root.Find([]string{"checkpoint", "export"})
	if err != nil {
		t.Fatal(err)
	}
	f := cmd.Flags().Lookup("mode")
	if f == nil {
		t.Fatal("checkpoint export has no --mode flag")
	}
	return f.DefValue
}
