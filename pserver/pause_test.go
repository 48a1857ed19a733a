package pserver

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver/wire"
)

// pausedChildEnv makes TestPausedProcessRefuses run as the serving child.
const pausedChildEnv = "RAFTPS_TEST_PAUSED_HOLDER"

// pausedDeadline is how long after it starts serving the child's deadline
// passes.
const pausedDeadline = 2 * time.Second

// TestPausedProcessRefuses (issue 33, a paused old holder): a real process
// serving a slot under a deadline, with a watchdog timer that unhosts it at
// the deadline as the agent's does, is stopped (SIGSTOP) before the
// deadline and continued (SIGCONT) well after it; a Pull sent while it was
// stopped waits in its socket. Whichever of the request and the timer's
// goroutine runs first, the request is answered Unavailable: the slot
// checks the deadline on the monotonic clock, which ran on while the
// process was stopped.
func TestPausedProcessRefuses(t *testing.T) {
	if os.Getenv(pausedChildEnv) == "1" {
		servePausedChild()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestPausedProcessRefuses$")
	cmd.Env = append(os.Environ(), pausedChildEnv+"=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if l := sc.Text(); strings.HasPrefix(l, "serving ") {
				lines <- l
				return
			}
		}
		close(lines)
	}()
	var addr string
	var left time.Duration
	select {
	case l, ok := <-lines:
		f := strings.Fields(l)
		if !ok || len(f) != 3 {
			t.Fatalf("child: %q", l)
		}
		ns, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		addr, left = f[1], time.Duration(ns)
	case <-time.After(30 * time.Second):
		t.Fatal("the child never served")
	}
	// left is the deadline's distance when the child printed it: the
	// deadline passes no later than left from now, on any clock.
	seen := time.Now()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cc.Connect()
	for s := cc.GetState(); s != connectivity.Ready; s = cc.GetState() {
		if !cc.WaitForStateChange(ctx, s) {
			t.Fatalf("no connection to the child: %v", s)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	time.Sleep(time.Until(seen.Add(left + 500*time.Millisecond)))
	done := make(chan error, 1)
	go func() {
		_, err := pb.NewPServerClient(cc).Pull(ctx, &pb.PullRequest{Job: "job", Slot: 0})
		done <- err
	}()
	time.Sleep(300 * time.Millisecond) // the request waits in the stopped child's socket
	select {
	case err := <-done:
		t.Fatalf("the stopped child answered: %v", err)
	default:
	}
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	err = <-done
	t.Logf("stopped %v before the deadline, for %v; the queued pull got: %v",
		seen.Add(left).Sub(stopped).Round(time.Millisecond), time.Since(stopped).Round(time.Millisecond), err)
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("a pull queued while the holder was paused past its deadline got %v (code %v), want Unavailable", err, status.Code(err))
	}
}

// servePausedChild serves slot 0 of syncSpec until killed, under a
// deadline pausedDeadline from now and a watchdog that unhosts it then,
// and prints "serving <addr> <ns to the deadline>".
func servePausedChild() {
	spec := syncSpec()
	s, err := NewSlot(spec, 0, 1)
	if err != nil {
		panic(err)
	}
	srv := NewServer()
	d := NewDeadline(nil)
	d.Extend(time.Now().Add(pausedDeadline))
	s.SetDeadline(d)
	srv.Host(spec.GetName(), 0, s)
	time.AfterFunc(time.Until(d.Until()), func() { srv.Unhost(spec.GetName(), 0) })
	lis, err := wire.Listen("127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	gs := grpc.NewServer(wire.ServerOptions()...)
	pb.RegisterPServerServer(gs, srv)
	go func() { _ = gs.Serve(lis) }()
	fmt.Printf("serving %s %d\n", lis.Addr(), int64(time.Until(d.Until())))
	select {}
}
