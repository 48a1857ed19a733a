package raftstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/raftps/raftps/security"
)

// raftALPN is the ALPN protocol of the Raft port: a gRPC or HTTP client
// that reaches it by mistake fails the handshake with a clear reason.
const raftALPN = "raftps-raft"

// Bounds of the Raft port's TLS handshakes. A handshake runs in its own
// goroutine, never on the accept path, so a connection that sends nothing
// delays no other (issue 32: one handshake at a time, 10 s each, let idle
// connections stall elections for as long as they were held).
const (
	// raftHandshakeTimeout bounds one handshake; a TLS 1.3 handshake
	// between nodes takes a round trip and a few signatures.
	raftHandshakeTimeout = 3 * time.Second
	// raftHandshakesPerSource bounds the handshakes in flight from one IP
	// address: more are closed at once. A node opens a handful of
	// connections to a peer (the transport's pool of 3, snapshots,
	// heartbeats, votes).
	raftHandshakesPerSource = 16
)

// tlsStreamLayer is hashicorp/raft's StreamLayer over mutual TLS: both
// ends present a certificate of the cluster CA with the node role
// (security.RoleNode), TLS 1.3 only, material reloaded on change. A
// plaintext peer or one with a client certificate fails the handshake and
// never reaches Raft. Handshakes run concurrently off the accept loop,
// each bounded by raftHandshakeTimeout, at most raftHandshakesPerSource
// at a time from one IP address.
type tlsStreamLayer struct {
	lis    net.Listener // plain TCP
	adv    net.Addr
	m      *security.Material
	server *tls.Config
	log    hclog.Logger

	ready  chan net.Conn // handshaken connections for Accept
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	lim    *security.SourceLimiter // handshakes in flight per source IP
}

// newTLSTransport returns a NetworkTransport on bind (advertising adv, or
// the bound address if nil) over mutual TLS with m.
func newTLSTransport(bind string, adv net.Addr, m *security.Material, log hclog.Logger) (*raft.NetworkTransport, error) {
	sl, err := newTLSStreamLayer(bind, adv, m, log)
	if err != nil {
		return nil, err
	}
	return raft.NewNetworkTransportWithLogger(sl, 3, 10*time.Second, log), nil
}

// newTLSStreamLayer listens on bind and starts the accept loop.
func newTLSStreamLayer(bind string, adv net.Addr, m *security.Material, log hclog.Logger) (*tlsStreamLayer, error) {
	lis, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, err
	}
	if adv == nil {
		adv = lis.Addr()
	}
	if a, ok := adv.(*net.TCPAddr); ok && a.IP.IsUnspecified() {
		lis.Close()
		return nil, fmt.Errorf("raftstore: advertise address %v is not routable", adv)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &tlsStreamLayer{lis: lis, adv: adv, m: m, server: m.ServerConfig(requireNode, raftALPN), log: log,
		ready: make(chan net.Conn), ctx: ctx, cancel: cancel, lim: security.NewSourceLimiter(raftHandshakesPerSource)}
	s.wg.Add(1)
	go s.acceptLoop()
	return s, nil
}

// requireNode refuses a verified peer certificate without the node role.
func requireNode(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return security.ErrNoCertificate
	}
	if r := security.RoleOf(cs.PeerCertificates[0]); r != security.RoleNode {
		return fmt.Errorf("%w: the Raft port serves cluster nodes only; the peer presents role %q", security.ErrNotNode, r)
	}
	return nil
}

// acceptLoop accepts TCP connections and starts each one's handshake,
// until the listener is closed. Temporary accept errors (out of file
// descriptors) back off as net/http's server does.
func (s *tlsStreamLayer) acceptLoop() {
	defer s.wg.Done()
	var delay time.Duration
	for {
		c, err := s.lis.Accept()
		if err != nil {
			if s.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			s.log.Warn("raft port: accept failed; retrying", "error", err, "delay", delay)
			select {
			case <-s.ctx.Done():
				return
			case <-time.After(delay):
			}
			continue
		}
		delay = 0
		src, ok := s.lim.Begin(c.RemoteAddr())
		if !ok {
			s.log.Debug("raft port: too many handshakes from one source; connection closed", "source", src)
			c.Close()
			continue
		}
		s.wg.Add(1)
		go s.handshake(c, src)
	}
}

// handshake runs c's TLS handshake within raftHandshakeTimeout and hands
// the connection to Accept; a failed handshake (plaintext, another CA, a
// client certificate, silence) closes it.
func (s *tlsStreamLayer) handshake(c net.Conn, src string) {
	defer s.wg.Done()
	tc := tls.Server(c, s.server)
	ctx, cancel := context.WithTimeout(s.ctx, raftHandshakeTimeout)
	_ = c.SetDeadline(time.Now().Add(raftHandshakeTimeout))
	err := tc.HandshakeContext(ctx)
	cancel()
	s.lim.End(src)
	if err != nil {
		s.log.Debug("raft port: handshake failed", "source", c.RemoteAddr(), "error", err)
		tc.Close()
		return
	}
	_ = c.SetDeadline(time.Time{})
	select {
	case s.ready <- tc:
	case <-s.ctx.Done():
		tc.Close()
	}
}

// Accept returns the next connection whose handshake succeeded.
func (s *tlsStreamLayer) Accept() (net.Conn, error) {
	select {
	case c := <-s.ready:
		return c, nil
	case <-s.ctx.Done():
		return nil, net.ErrClosed
	}
}

// Close stops accepting, aborts the handshakes in flight and waits for
// their goroutines.
func (s *tlsStreamLayer) Close() error {
	s.cancel()
	err := s.lis.Close()
	s.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

func (s *tlsStreamLayer) Addr() net.Addr { return s.adv }

// Dial connects to a peer's Raft port with the node's certificate and
// checks the peer's (CA and node role; host name against its SANs).
func (s *tlsStreamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	host, _, err := net.SplitHostPort(string(address))
	if err != nil {
		return nil, err
	}
	d := &net.Dialer{Timeout: timeout}
	return tls.DialWithDialer(d, "tcp", string(address), s.m.ClientConfig(host, raftALPN))
}

// ErrPeerIdentity: the server at a Raft address did not prove that it is
// the cluster node gossip names (no TLS on its Raft port, another CA, not
// the node role, or a certificate of another name).
var ErrPeerIdentity = errors.New("raftstore: peer did not prove its node identity")

// verifyPeerTimeout bounds VerifyPeer's dial and handshake.
const verifyPeerTimeout = 3 * time.Second

// VerifyPeer proves that the server at raftAddr is cluster node id before
// it is made a member: it dials raftAddr's Raft port with mutual TLS, the
// transport's own check (a certificate of the cluster CA with the node
// role whose SANs hold raftAddr's host), and requires the certificate's
// common name to be id. A failure wraps ErrPeerIdentity. Without TLS
// (--insecure) there is nothing to prove and it returns nil. Gossip is
// not authenticated unless it has a keyring, so the master calls this
// before it adds a server that gossip reported (issue 32, hole 3).
func (s *Store) VerifyPeer(ctx context.Context, id, raftAddr string) error {
	if s.cfg.TLS == nil {
		return nil
	}
	host, _, err := net.SplitHostPort(raftAddr)
	if err != nil {
		return fmt.Errorf("%w: %s at %q: %v", ErrPeerIdentity, id, raftAddr, err)
	}
	ctx, cancel := context.WithTimeout(ctx, verifyPeerTimeout)
	defer cancel()
	d := tls.Dialer{Config: s.cfg.TLS.ClientConfig(host, raftALPN)}
	c, err := d.DialContext(ctx, "tcp", raftAddr)
	if err != nil {
		return fmt.Errorf("%w: %s at %s: %v", ErrPeerIdentity, id, raftAddr, err)
	}
	defer c.Close()
	certs := c.(*tls.Conn).ConnectionState().PeerCertificates
	if name := certs[0].Subject.CommonName; name != id {
		return fmt.Errorf("%w: %s at %s presents the certificate of node %q", ErrPeerIdentity, id, raftAddr, name)
	}
	return nil
}
