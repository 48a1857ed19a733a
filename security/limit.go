package security

import (
	"fmt"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc/credentials"
)

// HandshakeTimeout bounds a TLS handshake on the gRPC ports
// (grpc.ConnectionTimeout; gRPC's default is 120 s) and the HTTP port
// (its ReadHeaderTimeout): a connection that sends nothing is closed
// after it.
const HandshakeTimeout = 5 * time.Second

// HandshakesPerSource bounds the TLS handshakes in flight from one IP
// address on a gRPC server (ServerCredentials): more are refused at once,
// so one host cannot hold an unbounded number of unauthenticated
// connections open. Handshakes take milliseconds; the bound is wide for
// many clients behind one address starting together.
const HandshakesPerSource = 256

// SourceLimiter counts what is in flight per source IP address and
// refuses beyond a cap (Begin/End). Safe for concurrent use.
type SourceLimiter struct {
	max int
	mu  sync.Mutex
	n   map[string]int
}

// NewSourceLimiter returns a limiter of max per source.
func NewSourceLimiter(max int) *SourceLimiter {
	return &SourceLimiter{max: max, n: map[string]int{}}
}

// Begin counts one more from a's IP address, or reports false (and counts
// nothing) at the cap.
func (l *SourceLimiter) Begin(a net.Addr) (string, bool) {
	src := SourceIP(a)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n[src] >= l.max {
		return src, false
	}
	l.n[src]++
	return src, true
}

// End uncounts one Begin of src.
func (l *SourceLimiter) End(src string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n[src]--; l.n[src] <= 0 {
		delete(l.n, src)
	}
}

// SourceIP is the IP address of a (the whole address if it has no port).
func SourceIP(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// limitedCreds refuses a server handshake beyond HandshakesPerSource in
// flight from the peer's address.
type limitedCreds struct {
	credentials.TransportCredentials
	lim *SourceLimiter
}

func (c *limitedCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	src, ok := c.lim.Begin(conn.RemoteAddr())
	if !ok {
		return nil, nil, fmt.Errorf("security: %d TLS handshakes in flight from %s: connection refused", c.lim.max, src)
	}
	defer c.lim.End(src)
	return c.TransportCredentials.ServerHandshake(conn)
}

func (c *limitedCreds) Clone() credentials.TransportCredentials {
	return &limitedCreds{TransportCredentials: c.TransportCredentials.Clone(), lim: c.lim}
}
