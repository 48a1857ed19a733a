package raftstore

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/raftps/raftps/security"
)

// raftALPN is the ALPN protocol of the Raft port: a gRPC or HTTP client
// that reaches it by mistake fails the handshake with a clear reason.
const raftALPN = "raftps-raft"

// tlsStreamLayer is hashicorp/raft's StreamLayer over mutual TLS: both
// ends present a certificate of the cluster CA with the node role
// (security.RoleNode), TLS 1.3 only, material reloaded on change. A
// plaintext peer or one with a client certificate fails the handshake and
// never reaches Raft.
type tlsStreamLayer struct {
	net.Listener
	adv net.Addr
	m   *security.Material
}

// newTLSTransport returns a NetworkTransport on bind (advertising adv, or
// the bound address if nil) over mutual TLS with m.
func newTLSTransport(bind string, adv net.Addr, m *security.Material, log hclog.Logger) (*raft.NetworkTransport, error) {
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
	server := m.ServerConfig(requireNode, raftALPN)
	sl := &tlsStreamLayer{Listener: tls.NewListener(lis, server), adv: adv, m: m}
	return raft.NewNetworkTransportWithLogger(sl, 3, 10*time.Second, log), nil
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

// Accept returns the next connection after its handshake succeeded; a
// failed handshake (plaintext, another CA, a client certificate) is
// closed and logged by the caller's read error, and Accept goes on.
func (s *tlsStreamLayer) Accept() (net.Conn, error) {
	for {
		c, err := s.Listener.Accept()
		if err != nil {
			return nil, err
		}
		tc := c.(*tls.Conn)
		_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
		if err := tc.Handshake(); err != nil {
			tc.Close()
			if errors.Is(err, net.ErrClosed) {
				return nil, err
			}
			continue
		}
		_ = tc.SetDeadline(time.Time{})
		return tc, nil
	}
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
