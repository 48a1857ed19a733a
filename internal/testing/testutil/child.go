package testutil

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// StartChild runs this test binary again as a child process with env
// added to its environment and no test selected (-test.run=^$), so the
// package's TestMain (or an init) sees env and plays the child's part.
// It returns the child and the first line the child printed on its
// stdout (without the newline), which the child prints once it is ready;
// the child's stderr goes to this process's. The child is killed when
// the test ends (SIGKILL, which also ends a stopped child).
func StartChild(t testing.TB, env ...string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.v=false")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, _ := bufio.NewReader(out).ReadString('\n')
	return cmd, strings.TrimSuffix(line, "\n")
}
