package wire

import (
	"context"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"google.golang.org/grpc"
)

// SocketBufferBytes is the kernel send and receive buffer (SO_SNDBUF,
// SO_RCVBUF) asked for on both ends of a pserver connection: a listener
// made by Listen passes it to the connections it accepts, and the dialer
// of DialOptions sets it before connecting.
//
// Each is asked for only where the kernel grants all of it
// (net.core.wmem_max and net.core.rmem_max at least SocketBufferBytes).
// A buffer set by hand turns off the kernel's autotuning for that socket,
// and a capped one (Linux's default cap is 208 KiB) is smaller than what
// autotuning reaches, and was slower in our runs. Where the caps allow
// it, fixed 4 MiB buffers made small push+pulls faster and left 10M-parameter
// ones unchanged (pserver/DESIGN.md, "Measured").
const SocketBufferBytes = 4 << 20

// Listen is net.Listen("tcp", addr) with the pserver's socket buffers on
// the listening socket, which every accepted connection inherits. Serve
// the pserver's gRPC server (ServerOptions) on it.
func Listen(addr string) (net.Listener, error) {
	lc := net.ListenConfig{Control: bufferControl}
	return lc.Listen(context.Background(), "tcp", addr)
}

// dialOption makes gRPC connect with Dial.
var dialOption = grpc.WithContextDialer(Dial)

// Dial connects to addr (host:port) over TCP with the pserver's socket
// buffers set before the handshake, so the window scale offered covers
// the receive buffer. It dials addr directly: pserver traffic does not go
// through an HTTP proxy.
func Dial(ctx context.Context, addr string) (net.Conn, error) {
	d := net.Dialer{Control: bufferControl}
	return d.DialContext(ctx, "tcp", addr)
}

// bufferControl sets the socket buffers socketBuffers allows on a socket
// before it binds or connects. A refusal leaves the kernel's defaults:
// slower, not wrong.
func bufferControl(_, _ string, c syscall.RawConn) error {
	snd, rcv := hostSocketBuffers()
	if snd == 0 && rcv == 0 {
		return nil
	}
	return c.Control(func(fd uintptr) {
		if snd > 0 {
			_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, snd)
		}
		if rcv > 0 {
			_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, rcv)
		}
	})
}

// hostSocketBuffers is socketBuffers of this host's caps, read once.
var hostSocketBuffers = sync.OnceValues(func() (snd, rcv int) {
	return socketBuffers(readSysctl("/proc/sys/net/core/wmem_max"), readSysctl("/proc/sys/net/core/rmem_max"))
})

// socketBuffers returns the SO_SNDBUF and SO_RCVBUF to set under the
// kernel caps wmemMax and rmemMax (bytes; -1: unknown): SocketBufferBytes
// where the cap grants it, else 0 (leave the kernel's autotuning).
func socketBuffers(wmemMax, rmemMax int) (snd, rcv int) {
	if wmemMax >= SocketBufferBytes {
		snd = SocketBufferBytes
	}
	if rmemMax >= SocketBufferBytes {
		rcv = SocketBufferBytes
	}
	return snd, rcv
}

// readSysctl reads an integer from a /proc/sys file, -1 if it cannot.
func readSysctl(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return -1
	}
	return n
}
