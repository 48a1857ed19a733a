package security

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// Default validity periods (Consul's `consul tls`: 5 years for the CA,
// 1 year for certificates).
const (
	DefaultCADays   = 5 * 365
	DefaultCertDays = 365
)

// ErrExists: a file to be written exists already (nothing is overwritten).
var ErrExists = errors.New("security: file exists")

// CA is a cluster certificate authority loaded from or written to PEM.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
}

// NewCA creates a self-signed CA (ECDSA P-256) valid for days.
func NewCA(name string, days int) (*CA, []byte, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name, Organization: []string{"raftps"}},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(time.Duration(days) * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, err
	}
	keyPEM, err := keyPEM(key)
	if err != nil {
		return nil, nil, nil, err
	}
	return &CA{Cert: cert, Key: key}, certPEM(der), keyPEM, nil
}

// LoadCA reads a CA's certificate and key PEM files.
func LoadCA(certFile, keyFile string) (*CA, error) {
	cb, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("security: CA certificate: %w", err)
	}
	kb, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("security: CA key: %w", err)
	}
	cblk, _ := pem.Decode(cb)
	kblk, _ := pem.Decode(kb)
	if cblk == nil || kblk == nil {
		return nil, fmt.Errorf("%w %q / %q", ErrNoCA, certFile, keyFile)
	}
	cert, err := x509.ParseCertificate(cblk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("security: CA certificate %q: %w", certFile, err)
	}
	k, err := x509.ParsePKCS8PrivateKey(kblk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("security: CA key %q: %w", keyFile, err)
	}
	signer, ok := k.(crypto.Signer)
	if !ok || !cert.IsCA {
		return nil, fmt.Errorf("%w: %q is not a CA certificate with its key", ErrNoCA, certFile)
	}
	return &CA{Cert: cert, Key: signer}, nil
}

// CertRequest describes a certificate to issue.
type CertRequest struct {
	Name string // common name: the node ID or the client's name
	Role string // RoleNode, RoleAdmin, RoleTrainer or RoleReader
	Jobs []string
	IPs  []net.IP
	DNS  []string
	// NotBefore/NotAfter; zero NotAfter means DefaultCertDays from now.
	NotBefore, NotAfter time.Time
}

// Issue signs a new certificate and key (ECDSA P-256) for req. A node
// certificate is for both server and client authentication (nodes dial
// each other); a client certificate for client authentication only.
func (ca *CA) Issue(req CertRequest) (certPEMBytes, keyPEMBytes []byte, err error) {
	if !ValidRole(req.Role) {
		return nil, nil, fmt.Errorf("security: unknown role %q", req.Role)
	}
	if req.Name == "" {
		return nil, nil, errors.New("security: a certificate needs a name")
	}
	for _, j := range req.Jobs {
		if !ValidJob(j) {
			return nil, nil, fmt.Errorf("security: job %q is neither a job name nor a path.Match pattern", j)
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	nb, na := req.NotBefore, req.NotAfter
	if nb.IsZero() {
		nb = time.Now().Add(-time.Minute)
	}
	if na.IsZero() {
		na = time.Now().Add(DefaultCertDays * 24 * time.Hour)
	}
	uris := []*url.URL{RoleURI(req.Role)}
	for _, j := range req.Jobs {
		uris = append(uris, JobURI(j))
	}
	usage := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	if req.Role == RoleNode {
		usage = append(usage, x509.ExtKeyUsageServerAuth)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: req.Name, Organization: []string{"raftps"}, OrganizationalUnit: []string{req.Role}},
		NotBefore:    nb,
		NotAfter:     na,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usage,
		IPAddresses:  req.IPs,
		DNSNames:     req.DNS,
		URIs:         uris,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, nil, err
	}
	kp, err := keyPEM(key)
	if err != nil {
		return nil, nil, err
	}
	return certPEM(der), kp, nil
}

func newSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
}

func certPEM(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func keyPEM(k crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// WriteFile writes data to path with mode 0600, refusing (ErrExists) to
// overwrite a file unless overwrite. The file is written beside and
// renamed, so a reader (a node reloading its certificate) never sees half
// of it.
func WriteFile(path string, data []byte, overwrite bool) error {
	if !overwrite {
		if _, err := os.Stat(path); err == nil {
			return fmt.Errorf("%w: %s", ErrExists, path)
		}
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// Dev writes a CA and certificates for a loopback cluster into dir (the
// demo's and the tests'): ca.pem/ca-key.pem, <node>.pem/<node>-key.pem
// for each node (IP 127.0.0.1, DNS localhost) and admin.pem/admin-key.pem
// (role admin). It returns the node files by ID and the admin's.
func Dev(dir string, nodes []string) (map[string]Files, Files, error) {
	ca, cpem, kpem, err := NewCA("raftps dev CA", 30)
	if err != nil {
		return nil, Files{}, err
	}
	caFile := filepath.Join(dir, "ca.pem")
	if err := WriteFile(caFile, cpem, true); err != nil {
		return nil, Files{}, err
	}
	if err := WriteFile(filepath.Join(dir, "ca-key.pem"), kpem, true); err != nil {
		return nil, Files{}, err
	}
	issue := func(name string, req CertRequest) (Files, error) {
		c, k, err := ca.Issue(req)
		if err != nil {
			return Files{}, err
		}
		f := Files{CA: caFile, Cert: filepath.Join(dir, name+".pem"), Key: filepath.Join(dir, name+"-key.pem")}
		if err := WriteFile(f.Cert, c, true); err != nil {
			return Files{}, err
		}
		return f, WriteFile(f.Key, k, true)
	}
	out := map[string]Files{}
	for _, id := range nodes {
		f, err := IssueDev(ca, dir, id)
		if err != nil {
			return nil, Files{}, err
		}
		out[id] = f
	}
	admin, err := issue("admin", CertRequest{Name: "admin", Role: RoleAdmin})
	if err != nil {
		return nil, Files{}, err
	}
	return out, admin, nil
}

// IssueDev issues a loopback node certificate (IP 127.0.0.1 and ::1, DNS
// localhost) for node id with ca into dir (<id>.pem, <id>-key.pem; the
// CA's certificate is dir/ca.pem).
func IssueDev(ca *CA, dir, id string) (Files, error) {
	return IssueFiles(ca, dir, CertRequest{Name: id, Role: RoleNode, IPs: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, DNS: []string{"localhost"}})
}

// IssueFiles issues req with ca into dir: <name>.pem and <name>-key.pem
// (0600, replacing what is there), with dir/ca.pem as the CA's
// certificate.
func IssueFiles(ca *CA, dir string, req CertRequest) (Files, error) {
	c, k, err := ca.Issue(req)
	if err != nil {
		return Files{}, err
	}
	f := Files{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, req.Name+".pem"), Key: filepath.Join(dir, req.Name+"-key.pem")}
	if err := WriteFile(f.Key, k, true); err != nil {
		return Files{}, err
	}
	return f, WriteFile(f.Cert, c, true)
}
