package wire

import (
	"context"
	"net"
	"syscall"
	"testing"
)

func TestSocketBuffersFollowCaps(t *testing.T) {
	for _, c := range []struct {
		wmem, rmem int
		snd, rcv   int
	}{
		{4 << 20, 4 << 20, SocketBufferBytes, SocketBufferBytes},
		{64 << 20, 32 << 20, SocketBufferBytes, SocketBufferBytes},
		{212992, 212992, 0, 0},                  // Linux's default caps: keep autotuning
		{4 << 20, 212992, SocketBufferBytes, 0}, // each option on its own cap
		{4<<20 - 1, 4 << 20, 0, SocketBufferBytes},
		{-1, -1, 0, 0}, // no /proc: leave the sockets alone
	} {
		snd, rcv := socketBuffers(c.wmem, c.rmem)
		if snd != c.snd || rcv != c.rcv {
			t.Errorf("socketBuffers(%d, %d) = %d, %d; want %d, %d", c.wmem, c.rmem, snd, rcv, c.snd, c.rcv)
		}
	}
}

// sockBufs returns a TCP connection's SO_SNDBUF and SO_RCVBUF as the
// kernel reports them (Linux: twice the value set).
func sockBufs(t *testing.T, c net.Conn) (snd, rcv int) {
	t.Helper()
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr, rerr error
	if err := rc.Control(func(fd uintptr) {
		snd, serr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF)
		rcv, rerr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF)
	}); err != nil {
		t.Fatal(err)
	}
	if serr != nil || rerr != nil {
		t.Fatal(serr, rerr)
	}
	return snd, rcv
}

// TestListenAndDialSetSocketBuffers: both ends of a pserver connection
// (accepted from Listen, made by the Client's dialer) carry the buffers
// hostSocketBuffers allows on this host, and a buffer it does not allow
// is left as on a plain socket.
func TestListenAndDialSetSocketBuffers(t *testing.T) {
	lis, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	accepted := make(chan net.Conn, 2)
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	ours, err := Dial(context.Background(), lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer ours.Close()
	theirs := <-accepted
	defer theirs.Close()
	plain, err := net.Dial("tcp", lis.Addr().String()) // the kernel's defaults, on the client side
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	plainAccepted := <-accepted
	defer plainAccepted.Close()

	snd, rcv := hostSocketBuffers()
	t.Logf("this host allows SO_SNDBUF %d, SO_RCVBUF %d (0: left to autotuning)", snd, rcv)
	want := func(set, def int) int {
		if set > 0 {
			return 2 * set // Linux doubles it for its bookkeeping
		}
		return def
	}
	for _, c := range []struct {
		name        string
		conn, plain net.Conn // plain: the same end of a connection made without our options
	}{{"dialed", ours, plain}, {"accepted", theirs, plainAccepted}} {
		defSnd, defRcv := sockBufs(t, c.plain)
		gs, gr := sockBufs(t, c.conn)
		if gs != want(snd, defSnd) || gr != want(rcv, defRcv) {
			t.Errorf("%s connection: SO_SNDBUF %d, SO_RCVBUF %d; want %d, %d (a plain socket: %d, %d)",
				c.name, gs, gr, want(snd, defSnd), want(rcv, defRcv), defSnd, defRcv)
		}
	}
}
