package integration

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// lockedBuffer is a bytes.Buffer safe for a writer and readers at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// devRun is one `raftps dev` process started by a test.
type devRun struct {
	cmd    *exec.Cmd
	stderr *lockedBuffer
	// env holds the RAFTPS_* variables of its printed export lines.
	env  []string
	done chan error
	// exited: the exit was received from done (by interrupt).
	exited bool
}

// startDev runs `raftps dev args...` with TMPDIR set to tmp and waits (up
// to 90 s) for its four export lines on stdout.
func startDev(t *testing.T, tmp string, args ...string) *devRun {
	t.Helper()
	cmd := exec.Command(binPath, append([]string{"dev"}, args...)...)
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	d := &devRun{cmd: cmd, stderr: &lockedBuffer{}, done: make(chan error, 1)}
	cmd.Stderr = d.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !d.exited {
			_ = cmd.Process.Kill()
			<-d.done
		}
	})
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		d.done <- cmd.Wait()
	}()
	deadline := time.After(90 * time.Second)
	for len(d.env) < 4 {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("raftps dev exited before printing its exports: %v\n%s", <-d.done, d.stderr)
			}
			kv, ok := strings.CutPrefix(l, "export ")
			if !ok || !strings.HasPrefix(kv, "RAFTPS_") || !strings.Contains(kv, "=") {
				t.Fatalf("raftps dev printed %q on stdout, want only export RAFTPS_*=... lines", l)
			}
			d.env = append(d.env, kv)
		case <-deadline:
			t.Fatalf("no export lines from raftps dev in 90 s:\n%s", d.stderr)
		}
	}
	go func() {
		for range lines { // nothing more is expected; drained so the child never blocks
		}
	}()
	return d
}

// cli runs the raftps CLI with only d's exports for flags (the user's
// shell after pasting them).
func (d *devRun) cli(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, args...)
	cmd.Env = append(os.Environ(), d.env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("raftps %s with the dev exports: %v\n%s\n(raftps dev said:\n%s)", strings.Join(args, " "), err, stderr.String(), d.stderr)
	}
	return string(out)
}

// interrupt sends SIGINT (Ctrl-C) and waits up to 60 s for the exit.
func (d *devRun) interrupt(t *testing.T) error {
	t.Helper()
	if err := d.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-d.done:
		d.exited = true
		return err
	case <-time.After(60 * time.Second):
		t.Fatalf("raftps dev still running 60 s after SIGINT:\n%s", d.stderr)
		return nil
	}
}

// TestDev (issue 37): `raftps dev` starts a 3-node TLS cluster and prints
// export lines with which the CLI alone reads and writes it; Ctrl-C stops
// every node cleanly (exit 0) and removes the temporary directory; with
// --dir the directory is kept and the next start is the same cluster,
// data included.
func TestDev(t *testing.T) {
	tmp := t.TempDir()
	d := startDev(t, tmp)
	if out := d.cli(t, "kv", "put", "/dev/a", "hello"); strings.TrimSpace(out) != "OK" {
		t.Fatalf("kv put: %q", out)
	}
	if out := d.cli(t, "kv", "get", "/dev/a"); strings.TrimSpace(out) != "hello" {
		t.Fatalf("kv get: %q", out)
	}
	if out := d.cli(t, "member", "list"); strings.Count(out, "voter") != 3 {
		t.Fatalf("member list, want 3 voters:\n%s", out)
	}
	for _, kv := range d.env {
		if strings.HasPrefix(kv, "RAFTPS_CACERT=") || strings.HasPrefix(kv, "RAFTPS_CERT=") || strings.HasPrefix(kv, "RAFTPS_KEY=") {
			if f := strings.SplitN(kv, "=", 2)[1]; !strings.HasPrefix(f, tmp) {
				t.Errorf("%s: not in the temporary directory %s", kv, tmp)
			}
		}
	}
	runREADMEFirstSteps(t, d)
	if err := d.interrupt(t); err != nil {
		t.Fatalf("raftps dev after SIGINT: %v, want exit 0:\n%s", err, d.stderr)
	}
	if !strings.Contains(d.stderr.String(), "==> stopped") {
		t.Errorf("no clean stop reported:\n%s", d.stderr)
	}
	if left, _ := filepath.Glob(filepath.Join(tmp, "raftps-dev-*")); len(left) > 0 {
		t.Errorf("the temporary cluster directory was left behind: %v", left)
	}

	// --dir keeps the state; the second start is the same cluster.
	dir := filepath.Join(tmp, "kept")
	d = startDev(t, tmp, "--dir", dir)
	d.cli(t, "kv", "put", "/dev/kept", "still here")
	if err := d.interrupt(t); err != nil {
		t.Fatalf("raftps dev --dir after SIGINT: %v:\n%s", err, d.stderr)
	}
	d = startDev(t, tmp, "--dir", dir)
	if !strings.Contains(d.stderr.String(), "restarted 3 nodes") {
		t.Errorf("second start with --dir does not say it restarted the cluster:\n%s", d.stderr)
	}
	if out := d.cli(t, "kv", "get", "/dev/kept"); strings.TrimSpace(out) != "still here" {
		t.Fatalf("kv get after the restart with --dir: %q, want %q", out, "still here")
	}
	if err := d.interrupt(t); err != nil {
		t.Fatalf("raftps dev --dir (second run) after SIGINT: %v:\n%s", err, d.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "pki", "ca.pem")); err != nil {
		t.Errorf("--dir not kept: %v", err)
	}
}

// runREADMEFirstSteps runs the README's "What to look at" block against
// d's cluster, line by line in sh from the repository's root, with d's
// exports (the pasted lines), the test's binary for ./bin/raftps and the
// dashboard address raftps dev printed; each line must exit 0. The make
// and raftps dev lines are what the test itself did.
func runREADMEFirstSteps(t *testing.T, d *devRun) {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), "## What to look at\n\n```sh\n")
	if !ok {
		t.Fatal(`README.md has no "## What to look at" sh block`)
	}
	block, _, _ = strings.Cut(block, "```")
	m := regexp.MustCompile(`==> dashboard: http://([0-9.:]+)/`).FindStringSubmatch(d.stderr.String())
	if m == nil {
		t.Fatalf("raftps dev printed no dashboard address:\n%s", d.stderr)
	}
	var ran int
	for _, line := range strings.Split(block, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") || line == "make build" || strings.HasPrefix(line, "./bin/raftps dev") {
			continue
		}
		line = strings.ReplaceAll(line, "./bin/raftps", binPath)
		line = strings.ReplaceAll(line, "<dashboard address>", m[1])
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		cmd := exec.CommandContext(ctx, "sh", "-c", line)
		cmd.Dir = ".."
		cmd.Env = append(os.Environ(), d.env...)
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("README line %q: %v\n%s", line, err, out)
		}
		ran++
	}
	if ran < 6 {
		t.Fatalf("ran %d lines of the README's block, want its 6 commands after raftps dev:\n%s", ran, block)
	}
}
