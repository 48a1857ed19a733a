package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftps/raftps/node"
)

// syncBuffer is a bytes.Buffer safe for a command writing while the test
// reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// background runs the CLI against n until ctx ends (as Ctrl-C ends it);
// the returned channel gives its error.
func background(ctx context.Context, n *node.Node, out *syncBuffer, args ...string) <-chan error {
	root := newRootCmd(out, out)
	root.SetArgs(append([]string{"--endpoints", n.GRPCAddr(), "--timeout", "10s"}, args...))
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	return done
}

// waitFor waits up to 20 s for cond.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestLockCommand (issue 37): raftps lock NAME holds the lock until
// cancelled (Ctrl-C), printing its key; a second lock NAME COMMAND waits
// behind it, then runs COMMAND with ETCD_LOCK_KEY set, and exits with
// COMMAND's status (etcdctl's lock).
func TestLockCommand(t *testing.T) {
	n := mustNode(t)
	ctxA, stopA := context.WithCancel(context.Background())
	defer stopA()
	var outA, outB syncBuffer
	doneA := background(ctxA, n, &outA, "lock", "/locks/l")
	waitFor(t, "the first holder's key", func() bool { return strings.HasPrefix(outA.String(), "/locks/l/") })
	keyA := strings.TrimSpace(outA.String())
	doneB := background(context.Background(), n, &outB, "lock", "/locks/l", "--", "sh", "-c", `echo "key=$ETCD_LOCK_KEY"; exit 7`)
	// B queues: its key exists beside A's while A holds the lock.
	waitFor(t, "the second waiter's key", func() bool {
		out, err := run(t, n, "kv", "get", "/locks/l/", "--prefix", "--keys-only")
		return err == nil && len(strings.Fields(out)) == 2
	})
	select {
	case err := <-doneB:
		t.Fatalf("the second lock ran while the first held it: %v, %q", err, outB.String())
	default:
	}
	stopA()
	if err := <-doneA; err != nil {
		t.Fatalf("first holder on Ctrl-C: %v", err)
	}
	err := <-doneB
	if code := exitCode(err, nil); code != 7 {
		t.Fatalf("lock COMMAND exiting 7: exit %d (%v)", code, err)
	}
	got := strings.TrimSpace(outB.String())
	if !strings.HasPrefix(got, "key=/locks/l/") || got == "key="+keyA {
		t.Fatalf("COMMAND printed %q; want its own ETCD_LOCK_KEY (first holder's was %s)", got, keyA)
	}
	if out, err := run(t, n, "kv", "get", "/locks/l/", "--prefix", "--keys-only"); err != nil || out != "" {
		t.Fatalf("lock keys after both released: %q, %v", out, err)
	}
}

// TestElectCommand (issue 37): raftps elect NAME PROPOSAL prints the
// leader key and proposal once elected; a second candidate waits until
// the first resigns (Ctrl-C); elect -l prints each leader's proposal;
// elect NAME without -l is a flag error (etcdctl's elect).
func TestElectCommand(t *testing.T) {
	n := mustNode(t)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	ctxA, stopA := context.WithCancel(ctx)
	var outA, outB, outL syncBuffer
	doneA := background(ctxA, n, &outA, "elect", "/elect/e", "p1")
	waitFor(t, "p1 elected", func() bool { return strings.HasSuffix(outA.String(), "\np1\n") })
	doneL := background(ctx, n, &outL, "elect", "-l", "/elect/e")
	waitFor(t, "the observer to print p1", func() bool { return strings.Contains(outL.String(), "\np1\n") })
	doneB := background(ctx, n, &outB, "elect", "/elect/e", "p2")
	waitFor(t, "the second candidate's key", func() bool {
		out, err := run(t, n, "kv", "get", "/elect/e/", "--prefix", "--keys-only")
		return err == nil && len(strings.Fields(out)) == 2
	})
	if s := outB.String(); s != "" {
		t.Fatalf("p2 elected while p1 leads: %q", s)
	}
	stopA()
	if err := <-doneA; err != nil {
		t.Fatalf("p1 resigning on Ctrl-C: %v", err)
	}
	waitFor(t, "p2 elected", func() bool { return strings.HasSuffix(outB.String(), "\np2\n") })
	waitFor(t, "the observer to print p2", func() bool { return strings.Contains(outL.String(), "\np2\n") })
	stop()
	for _, d := range []<-chan error{doneB, doneL} {
		if err := <-d; err != nil {
			t.Fatalf("elect on Ctrl-C: %v", err)
		}
	}
	if _, err := run(t, n, "elect", "/elect/e"); exitCode(err, nil) == 0 {
		t.Fatalf("elect without a proposal or -l: %v; want a flag error", err)
	}
}

// TestLockWithEtcdctl: Debian's etcdctl lock (3.4) and raftps lock on the
// same name exclude each other: raftps waits while etcdctl holds the
// lock, and takes it once etcdctl releases it on SIGINT.
func TestLockWithEtcdctl(t *testing.T) {
	n := mustNode(t)
	var etcdOut syncBuffer
	ectl := exec.Command("etcdctl", "--endpoints", n.GRPCAddr(), "lock", "/locks/x")
	ectl.Env = append(ectl.Environ(), "ETCDCTL_API=3")
	ectl.Stdout, ectl.Stderr = &etcdOut, &etcdOut
	if err := ectl.Start(); err != nil {
		t.Fatalf("etcdctl lock: %v (install Debian's etcd-client)", err)
	}
	defer ectl.Process.Kill()
	waitFor(t, "etcdctl to hold the lock", func() bool { return strings.HasPrefix(etcdOut.String(), "/locks/x/") })
	var out syncBuffer
	done := background(context.Background(), n, &out, "lock", "/locks/x", "--", "sh", "-c", "echo took it")
	waitFor(t, "raftps lock to queue", func() bool {
		o, err := run(t, n, "kv", "get", "/locks/x/", "--prefix", "--keys-only")
		return err == nil && len(strings.Fields(o)) == 2
	})
	select {
	case err := <-done:
		t.Fatalf("raftps lock ran while etcdctl held the lock: %v, %q", err, out.String())
	default:
	}
	if err := ectl.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil || out.String() != "took it\n" {
		t.Fatalf("raftps lock after etcdctl released: %q, %v", out.String(), err)
	}
	_ = ectl.Wait()
}
