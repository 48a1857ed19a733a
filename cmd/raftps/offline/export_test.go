package offline

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// previous is the backup an export to the same --out must not destroy.
var previous = []byte("yesterday's export\n")

// onlyFile fails unless dir holds exactly the file name (no temporary
// file left behind).
func onlyFile(t *testing.T, dir, name string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != name {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("%s holds %v, want only %s", dir, names, name)
	}
}

// TestFailedExportKeepsPreviousFile (issue 33 defect 7): an export that
// fails after writing part of the file leaves the previous file at --out
// as it was and no temporary file; a successful one replaces it whole,
// mode 0600. Before, --out was truncated with os.Create and removed on
// failure, deleting yesterday's backup.
func TestFailedExportKeepsPreviousFile(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "backup.rpsx")
	if err := os.WriteFile(out, previous, 0o600); err != nil {
		t.Fatal(err)
	}
	lost := errors.New("export: connection to the pserver lost")
	err := WriteFileAtomic(out, func(w io.Writer) error {
		if _, err := w.Write(bytes.Repeat([]byte{7}, 1<<20)); err != nil {
			return err
		}
		return lost
	})
	if !errors.Is(err, lost) {
		t.Fatalf("failed export returned %v, want %v", err, lost)
	}
	if got, err := os.ReadFile(out); err != nil || !bytes.Equal(got, previous) {
		t.Fatalf("after a failed export --out holds %d bytes (%v), want the previous %d", len(got), err, len(previous))
	}
	onlyFile(t, dir, "backup.rpsx")

	today := bytes.Repeat([]byte{9}, 3<<20)
	if err := WriteFileAtomic(out, func(w io.Writer) error { _, err := w.Write(today); return err }); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(out)
	if err != nil || !bytes.Equal(got, today) {
		t.Fatalf("after an export --out holds %d bytes (%v), want %d", len(got), err, len(today))
	}
	if fi, err := os.Stat(out); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("exported file mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}
	onlyFile(t, dir, "backup.rpsx")
}

// envKilledExport, set, makes the test binary the child of
// TestKilledExportLeavesPreviousFile (see TestMain): it exports to that
// --out path.
const envKilledExport = "RAFTPS_TEST_KILLED_EXPORT_OUT"

func TestMain(m *testing.M) {
	if out := os.Getenv(envKilledExport); out != "" {
		os.Exit(killedExport(out))
	}
	os.Exit(m.Run())
}

// killedExport writes 1 MiB of an export to out, says so on stdout and
// waits to be killed (exit 3 if it is not).
func killedExport(out string) int {
	_ = WriteFileAtomic(out, func(w io.Writer) error {
		if _, err := w.Write(bytes.Repeat([]byte{7}, 1<<20)); err != nil {
			return err
		}
		os.Stdout.WriteString("writing\n")
		time.Sleep(time.Minute)
		return errors.New("not killed")
	})
	return 3
}

// TestKilledExportLeavesPreviousFile (issue 33 defect 7): an export
// process killed (SIGKILL) halfway leaves the previous file at --out
// whole. Before, --out was already truncated and half written.
func TestKilledExportLeavesPreviousFile(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "backup.rpsx")
	if err := os.WriteFile(out, previous, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), envKilledExport+"="+out)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if line != "writing\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child said %q (%v), want \"writing\"", line, err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if got, err := os.ReadFile(out); err != nil || !bytes.Equal(got, previous) {
		t.Fatalf("after a killed export --out holds %d bytes (%v), want the previous %d", len(got), err, len(previous))
	}
}
