package node_test

import (
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/raftps/raftps/internal/testing/nodetest"
	"github.com/raftps/raftps/node"
	"github.com/raftps/raftps/security"
)

// idleConns opens n connections from src to addr that send nothing and
// returns a channel that yields, for each, when the node closed it
// (since the call).
func idleConns(t *testing.T, src net.IP, addr string, n int) <-chan time.Duration {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: src}, Timeout: 5 * time.Second}
	closed := make(chan time.Duration, n)
	start := time.Now()
	for range n {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		go func() {
			_ = c.SetReadDeadline(time.Now().Add(60 * time.Second))
			_, _ = c.Read(make([]byte, 1))
			closed <- time.Since(start)
		}()
	}
	return closed
}

// waitClosed reads n closings from closed and returns how many came
// before early; every one must come within within.
func waitClosed(t *testing.T, what string, closed <-chan time.Duration, n int, early, within time.Duration) (before int) {
	t.Helper()
	for i := range n {
		select {
		case at := <-closed:
			if at < early {
				before++
			}
		case <-time.After(within):
			t.Fatalf("%s: %d of %d idle connections still open after %v", what, n-i, n, within)
		}
	}
	return before
}

// TestIdleConnectionsBounded is hole 2's audit of the other listeners
// (issue 32): on the gRPC client port (mutual TLS) and the HTTP port, a
// connection that sends nothing is closed within
// security.HandshakeTimeout, the connections beyond the per-source cap
// are closed at once, and a client from another address is served
// meanwhile.
func TestIdleConnectionsBounded(t *testing.T) {
	files, _, err := security.Dev(t.TempDir(), []string{"n1"})
	if err != nil {
		t.Fatal(err)
	}
	n := nodetest.Open(t, "n1", []string{"server"}, func(c *node.Config) { c.TLS = files["n1"] })
	attacker := net.IPv4(127, 0, 0, 2)

	const extra = 3
	grpcClosed := idleConns(t, attacker, n.GRPCAddr(), security.HandshakesPerSource+extra)
	httpClosed := idleConns(t, attacker, n.HTTPAddr(), 256+extra) // httpNewPerSource

	// /healthz answers a client from another address meanwhile.
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(fmt.Sprintf("http://%s/healthz", n.HTTPAddr()))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	within := security.HandshakeTimeout + 10*time.Second
	if got := waitClosed(t, "gRPC", grpcClosed, security.HandshakesPerSource+extra, security.HandshakeTimeout/2, within); got != extra {
		t.Errorf("gRPC: %d idle connections closed at once, want the %d beyond the per-source cap", got, extra)
	}
	if got := waitClosed(t, "HTTP", httpClosed, 256+extra, security.HandshakeTimeout/2, within); got != extra {
		t.Errorf("HTTP: %d idle connections closed at once, want the %d beyond the per-source cap", got, extra)
	}
}
