package security

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// Errors of loading TLS material; each is wrapped with the file at fault.
var (
	// ErrIncomplete: some but not all of the CA, certificate and key files
	// were given.
	ErrIncomplete = errors.New("security: the CA, certificate and key files go together")
	// ErrNoCA: the CA file holds no PEM certificate.
	ErrNoCA = errors.New("security: no CA certificate in file")
	// ErrNotSigned: the certificate does not chain to the CA (a certificate
	// from another CA, or the CA file of another cluster).
	ErrNotSigned = errors.New("security: certificate not signed by the CA")
	// ErrExpired: the certificate is not valid now.
	ErrExpired = errors.New("security: certificate expired or not yet valid")
)

// Files names the PEM files of one party: the cluster CA (trust), and its
// own certificate and private key. The zero Files means no TLS.
type Files struct {
	CA, Cert, Key string
}

// Enabled reports whether any file is named.
func (f Files) Enabled() bool { return f.CA != "" || f.Cert != "" || f.Key != "" }

// Validate reports ErrIncomplete unless all three or none are named.
func (f Files) Validate() error {
	if f.Enabled() && (f.CA == "" || f.Cert == "" || f.Key == "") {
		return fmt.Errorf("%w (CA %q, certificate %q, key %q)", ErrIncomplete, f.CA, f.Cert, f.Key)
	}
	return nil
}

// PollInterval bounds how often a Material looks at its files' mtimes:
// a rotated certificate or CA is in use at most this long after it is
// written (without a restart).
const PollInterval = time.Second

// Material is one party's TLS material, reloaded from disk when a file
// changes: every handshake asks it for the current certificate and CA
// pool (GetConfigForClient on servers, a fresh config per handshake on
// clients), and it re-reads the files when their size or mtime changed,
// at most once per PollInterval. A reload that fails (a half-written
// file) keeps the previous material and logs why; the next poll tries
// again. TLS 1.3 only; mutual authentication against the CA. Safe for
// concurrent use.
type Material struct {
	files Files
	log   *slog.Logger

	mu      sync.Mutex
	cert    *tls.Certificate
	pool    *x509.CertPool
	stamp   string // sizes and mtimes of the files at the last load
	checked time.Time
	// conns are the open server connections of ServerCredentials, with
	// the peer chain each verified (reverified on a reload).
	conns map[*trackedConn]struct{}
}

// Load reads files (all three required) and returns their Material; log
// (nil: discard) gets a line per reload. The certificate must chain to
// the CA and be valid now.
func Load(files Files, log *slog.Logger) (*Material, error) {
	if !files.Enabled() {
		return nil, fmt.Errorf("%w: none given", ErrIncomplete)
	}
	if err := files.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &Material{files: files, log: log}
	stamp, err := m.stampFiles()
	if err != nil {
		return nil, err
	}
	cert, pool, err := loadFiles(files)
	if err != nil {
		return nil, err
	}
	m.cert, m.pool, m.stamp, m.checked = cert, pool, stamp, time.Now()
	return m, nil
}

// Files returns the files m loads.
func (m *Material) Files() Files { return m.files }

func (m *Material) stampFiles() (string, error) {
	var s string
	for _, p := range []string{m.files.CA, m.files.Cert, m.files.Key} {
		fi, err := os.Stat(p)
		if err != nil {
			return "", fmt.Errorf("security: %w", err)
		}
		s += fmt.Sprintf("%s:%d:%d;", p, fi.Size(), fi.ModTime().UnixNano())
	}
	return s, nil
}

func loadFiles(f Files) (*tls.Certificate, *x509.CertPool, error) {
	caPEM, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, nil, fmt.Errorf("security: CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, nil, fmt.Errorf("%w %q", ErrNoCA, f.CA)
	}
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("security: certificate %q and key %q: %w", f.Cert, f.Key, err)
	}
	leaf := cert.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, nil, fmt.Errorf("security: certificate %q: %w", f.Cert, err)
		}
	}
	now := time.Now()
	if now.Before(leaf.NotBefore) || now.After(leaf.NotAfter) {
		return nil, nil, fmt.Errorf("%w: %q valid %s to %s", ErrExpired, f.Cert,
			leaf.NotBefore.UTC().Format(time.RFC3339), leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	inter := x509.NewCertPool()
	for _, c := range cert.Certificate[1:] {
		if ic, err := x509.ParseCertificate(c); err == nil {
			inter.AddCert(ic)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, nil, fmt.Errorf("%w: %q against %q: %v", ErrNotSigned, f.Cert, f.CA, err)
	}
	return &cert, pool, nil
}

// current returns the certificate and CA pool, reloading them if a file
// changed since the last look (at most once per PollInterval).
func (m *Material) current() (*tls.Certificate, *x509.CertPool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if time.Since(m.checked) < PollInterval {
		return m.cert, m.pool
	}
	m.checked = time.Now()
	stamp, err := m.stampFiles()
	if err != nil {
		m.log.Warn("TLS reload: keeping the loaded certificate", "err", err)
		return m.cert, m.pool
	}
	if stamp == m.stamp {
		return m.cert, m.pool
	}
	cert, pool, err := loadFiles(m.files)
	if err != nil {
		m.log.Warn("TLS reload: keeping the loaded certificate", "err", err)
		return m.cert, m.pool
	}
	m.cert, m.pool, m.stamp = cert, pool, stamp
	m.log.Info("TLS material reloaded", "cert", m.files.Cert, "ca", m.files.CA)
	m.reverify(pool)
	return m.cert, m.pool
}

// Reload re-reads the files now if they changed (the handshakes do it by
// themselves; tests and SIGHUP use this).
func (m *Material) Reload() {
	m.mu.Lock()
	m.checked = time.Time{}
	m.mu.Unlock()
	m.current()
}

// Leaf returns the current certificate, parsed.
func (m *Material) Leaf() *x509.Certificate {
	cert, _ := m.current()
	if cert.Leaf != nil {
		return cert.Leaf
	}
	leaf, _ := x509.ParseCertificate(cert.Certificate[0])
	return leaf
}

// ServerConfig returns a server tls.Config: TLS 1.3, the current
// certificate, and a client certificate signed by the current CA required
// of every client. verify, if not nil, runs on each verified connection
// (the Raft port requires the node role with it). nextProtos are the ALPN
// protocols (gRPC needs "h2").
func (m *Material) ServerConfig(verify func(tls.ConnectionState) error, nextProtos ...string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		NextProtos: nextProtos,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cert, pool := m.current()
			return &tls.Config{
				MinVersion:       tls.VersionTLS13,
				Certificates:     []tls.Certificate{*cert},
				ClientCAs:        pool,
				ClientAuth:       tls.RequireAndVerifyClientCert,
				NextProtos:       nextProtos,
				VerifyConnection: verify,
			}, nil
		},
	}
}

// ClientConfig returns a client tls.Config for a server named serverName
// (host name or IP; checked against the server certificate's SANs):
// TLS 1.3, the current certificate and CA, and a server certificate that
// must carry the node role.
func (m *Material) ClientConfig(serverName string, nextProtos ...string) *tls.Config {
	cert, pool := m.current()
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		ServerName:   serverName,
		Certificates: []tls.Certificate{*cert},
		RootCAs:      pool,
		NextProtos:   nextProtos,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return ErrNoCertificate
			}
			if r := RoleOf(cs.PeerCertificates[0]); r != RoleNode {
				return fmt.Errorf("%w: the server presents role %q, not %q", ErrNotNode, r, RoleNode)
			}
			return nil
		},
	}
}

// ServerCredentials are gRPC server credentials over ServerConfig: every
// client must present a certificate of the cluster CA; the role checks
// are the Authorizer's, per method. The connections they accept are
// tracked: when a reload changes the material, each one whose client
// certificate no longer verifies against the (new) CA, or has expired,
// is closed, ending its calls and streams (Unavailable at the client),
// so a certificate the cluster stopped trusting keeps no live stream. At
// most HandshakesPerSource handshakes are in flight from one IP address
// per credentials (give each server its own); bound each with
// grpc.ConnectionTimeout(HandshakeTimeout).
func (m *Material) ServerCredentials() credentials.TransportCredentials {
	tracking := &trackingCreds{TransportCredentials: credentials.NewTLS(m.ServerConfig(nil, "h2")), m: m}
	return &limitedCreds{TransportCredentials: tracking, lim: NewSourceLimiter(HandshakesPerSource)}
}

// trackingCreds are TLS server credentials that register each accepted
// connection with its Material.
type trackingCreds struct {
	credentials.TransportCredentials
	m *Material
}

func (c *trackingCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ServerHandshake(raw)
	if err != nil {
		return conn, info, err
	}
	ti, ok := info.(credentials.TLSInfo)
	if !ok || len(ti.State.VerifiedChains) == 0 {
		return conn, info, nil
	}
	t := &trackedConn{Conn: conn, m: c.m, chain: ti.State.VerifiedChains[0]}
	c.m.mu.Lock()
	if c.m.conns == nil {
		c.m.conns = map[*trackedConn]struct{}{}
	}
	c.m.conns[t] = struct{}{}
	c.m.mu.Unlock()
	return t, info, nil
}

func (c *trackingCreds) Clone() credentials.TransportCredentials {
	return &trackingCreds{TransportCredentials: c.TransportCredentials.Clone(), m: c.m}
}

// trackedConn is a server connection of ServerCredentials with the chain
// its client presented (leaf first).
type trackedConn struct {
	net.Conn
	m     *Material
	chain []*x509.Certificate
	once  sync.Once
}

func (t *trackedConn) Close() error {
	t.once.Do(func() {
		t.m.mu.Lock()
		delete(t.m.conns, t)
		t.m.mu.Unlock()
	})
	return t.Conn.Close()
}

// reverify closes, in the background, every tracked connection whose
// client chain does not verify against pool now; m.mu is held.
func (m *Material) reverify(pool *x509.CertPool) {
	var stale []*trackedConn
	for t := range m.conns {
		inter := x509.NewCertPool()
		for _, c := range t.chain[1:] {
			inter.AddCert(c)
		}
		if _, err := t.chain[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			m.log.Warn("TLS reload: closing a connection whose certificate is no longer trusted",
				"name", t.chain[0].Subject.CommonName, "peer", t.RemoteAddr().String(), "err", err)
			stale = append(stale, t)
		}
	}
	go func() {
		for _, t := range stale {
			_ = t.Close()
		}
	}()
}

// ClientCredentials are gRPC client credentials that take the current
// material at each handshake (so a rotated certificate is used by new
// connections without redialing).
func (m *Material) ClientCredentials() credentials.TransportCredentials {
	return &reloadingCreds{m: m}
}

type reloadingCreds struct {
	m          *Material
	serverName string // override (OverrideServerName)
}

func (c *reloadingCreds) creds(authority string) credentials.TransportCredentials {
	name := c.serverName
	if name == "" {
		name = authority
		if h, _, err := net.SplitHostPort(authority); err == nil {
			name = h
		}
	}
	return credentials.NewTLS(c.m.ClientConfig(name, "h2"))
}

func (c *reloadingCreds) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return c.creds(authority).ClientHandshake(ctx, authority, conn)
}

func (c *reloadingCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("security: client credentials used on a server")
}

func (c *reloadingCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls", SecurityVersion: "1.3"}
}

func (c *reloadingCreds) Clone() credentials.TransportCredentials {
	cp := *c
	return &cp
}

//nolint:staticcheck // part of the interface
func (c *reloadingCreds) OverrideServerName(name string) error {
	c.serverName = name
	return nil
}

// GetCertificate returns the current certificate (tls.Config's
// GetCertificate, for servers that do not ask clients for one: the HTTP
// port).
func (m *Material) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	cert, _ := m.current()
	return cert, nil
}

// DialOptions are the gRPC dial options of a party with this material
// (ClientCredentials).
func (m *Material) DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithTransportCredentials(m.ClientCredentials())}
}
