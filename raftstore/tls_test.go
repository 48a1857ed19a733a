package raftstore

import (
	"crypto/tls"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/raftps/raftps/security"
)

// mustDevMaterial loads dev TLS material for nodes n1 and n2.
func mustDevMaterial(t *testing.T) (n1, n2 *security.Material) {
	t.Helper()
	files, _, err := security.Dev(t.TempDir(), []string{"n1", "n2"})
	if err != nil {
		t.Fatal(err)
	}
	if n1, err = security.Load(files["n1"], nil); err != nil {
		t.Fatal(err)
	}
	if n2, err = security.Load(files["n2"], nil); err != nil {
		t.Fatal(err)
	}
	return n1, n2
}

// TestRaftPortIdleConnections: idle connections (no byte sent) delay no
// node's connection (handshakes run concurrently), those beyond
// raftHandshakesPerSource from one address are closed at once, and the
// rest are closed after raftHandshakeTimeout.
func TestRaftPortIdleConnections(t *testing.T) {
	m1, m2 := mustDevMaterial(t)
	sl, err := newTLSStreamLayer("127.0.0.1:0", nil, m1, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer sl.Close()
	addr := sl.Addr().String()

	const extra = 4
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	closedAt := make(chan time.Duration, raftHandshakesPerSource+extra)
	start := time.Now()
	for range raftHandshakesPerSource + extra {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		go func() {
			_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
			_, _ = c.Read(make([]byte, 1))
			closedAt <- time.Since(start)
		}()
	}
	time.Sleep(200 * time.Millisecond) // the idle connections are accepted

	// A node's connection is accepted at once despite them.
	t0 := time.Now()
	cc, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, m2.ClientConfig("127.0.0.1", raftALPN))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := sl.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	select {
	case c := <-accepted:
		c.Close()
		t.Logf("a node's connection accepted in %v beside %d idle ones", time.Since(t0).Round(time.Millisecond), raftHandshakesPerSource+extra)
	case <-time.After(2 * time.Second):
		t.Fatal("a node's connection was not accepted within 2 s while idle connections were held")
	}

	var early, late int
	for range raftHandshakesPerSource + extra {
		select {
		case at := <-closedAt:
			if at < raftHandshakeTimeout/2 {
				early++
			} else {
				late++
			}
		case <-time.After(raftHandshakeTimeout + 5*time.Second):
			t.Fatalf("an idle connection is still open after %v (closed early %d, late %d)", raftHandshakeTimeout+5*time.Second, early, late)
		}
	}
	if early != extra || late != raftHandshakesPerSource {
		t.Fatalf("closed at once %d (want %d beyond the per-source cap), after the handshake timeout %d (want %d)",
			early, extra, late, raftHandshakesPerSource)
	}
}
