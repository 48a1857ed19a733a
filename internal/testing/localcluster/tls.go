package localcluster

import (
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/raftps/raftps/security"
)

// PKI is a local cluster's security material in one directory: a CA
// (ca.pem, ca-key.pem), the admin's client certificate (admin.pem,
// admin-key.pem) and the gossip keyring every node starts with
// (gossip.keyring, one 32-byte key). New makes one in <dir>/pki unless
// the nodes run --insecure; the Jepsen suite makes one for its hosts.
type PKI struct {
	Dir    string
	CA     *security.CA
	Admin  security.Files
	Gossip [][]byte // the initial keyring, primary first
}

// NewPKI makes a CA, the admin's certificate and a gossip key in dir
// (created 0700), overwriting what is there.
func NewPKI(dir string) (*PKI, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if _, _, err := security.Dev(dir, nil); err != nil {
		return nil, fmt.Errorf("localcluster: CA in %s: %w", dir, err)
	}
	if err := security.NewKeyringFile(filepath.Join(dir, "gossip.keyring")); err != nil {
		return nil, err
	}
	return LoadPKI(dir)
}

// LoadPKI reads the PKI NewPKI wrote in dir.
func LoadPKI(dir string) (*PKI, error) {
	ca, err := security.LoadCA(filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem"))
	if err != nil {
		return nil, err
	}
	keys, err := security.LoadKeyringFile(filepath.Join(dir, "gossip.keyring"))
	if err != nil {
		return nil, err
	}
	return &PKI{Dir: dir, CA: ca, Gossip: keys, Admin: security.Files{CA: filepath.Join(dir, "ca.pem"),
		Cert: filepath.Join(dir, "admin.pem"), Key: filepath.Join(dir, "admin-key.pem")}}, nil
}

// IssueNode issues node id's certificate into the PKI's directory
// (<id>.pem, <id>-key.pem): for ips, or for loopback (127.0.0.1, ::1,
// localhost) when none are given.
func (p *PKI) IssueNode(id string, ips ...net.IP) (security.Files, error) {
	if len(ips) == 0 {
		return security.IssueDev(p.CA, p.Dir, id)
	}
	return p.issue(id, security.CertRequest{Name: id, Role: security.RoleNode, IPs: ips})
}

// IssueClient issues a client certificate with role (security.RoleAdmin,
// RoleTrainer, RoleReader; a trainer's jobs) into the PKI's directory as
// <name>.pem and <name>-key.pem.
func (p *PKI) IssueClient(name, role string, jobs ...string) (security.Files, error) {
	return p.issue(name, security.CertRequest{Name: name, Role: role, Jobs: jobs})
}

func (p *PKI) issue(name string, req security.CertRequest) (security.Files, error) {
	c, k, err := p.CA.Issue(req)
	if err != nil {
		return security.Files{}, err
	}
	f := security.Files{CA: filepath.Join(p.Dir, "ca.pem"), Cert: filepath.Join(p.Dir, name+".pem"), Key: filepath.Join(p.Dir, name+"-key.pem")}
	if err := security.WriteFile(f.Key, k, true); err != nil {
		return security.Files{}, err
	}
	return f, security.WriteFile(f.Cert, c, true)
}

// NodeFlags issues node id's certificate (IssueNode), writes its own copy
// of the gossip keyring to keyringFile (`raftps keyring` rewrites a
// node's file) and returns the node's flags: --tls-ca-file,
// --tls-cert-file, --tls-key-file and --gossip-keyring-file.
func (p *PKI) NodeFlags(id, keyringFile string, ips ...net.IP) ([]string, error) {
	f, err := p.IssueNode(id, ips...)
	if err != nil {
		return nil, err
	}
	if err := security.SaveKeyringFile(keyringFile, p.Gossip); err != nil {
		return nil, err
	}
	return append(tlsFlags(f), "--gossip-keyring-file", keyringFile), nil
}

func tlsFlags(f security.Files) []string {
	return []string{"--tls-ca-file", f.CA, "--tls-cert-file", f.Cert, "--tls-key-file", f.Key}
}

// DialOptions are the gRPC dial options of a client holding files (the
// admin's: Node.Admin, PKI.Admin): mutual TLS 1.3 with material reloaded
// from disk (security.Material.DialOptions), or plaintext for the zero
// Files (a cluster started with --insecure). Every test client of a local
// cluster dials with these.
func DialOptions(f security.Files) ([]grpc.DialOption, error) {
	if !f.Enabled() {
		return []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, nil
	}
	m, err := security.Load(f, nil)
	if err != nil {
		return nil, err
	}
	return m.DialOptions(), nil
}

// ClientTLS is the *tls.Config of a client holding files, for clients
// that take one rather than gRPC options (etcd's clientv3.Config.TLS):
// TLS 1.3, the client's certificate, the cluster CA, and a server that
// must present the node role; the server name is left empty for gRPC to
// fill in from each endpoint. Nil for the zero Files (plaintext).
func ClientTLS(f security.Files) (*tls.Config, error) {
	if !f.Enabled() {
		return nil, nil
	}
	m, err := security.Load(f, nil)
	if err != nil {
		return nil, err
	}
	return m.ClientConfig(""), nil
}

// CLIFlags are the `raftps` client flags of files (--cacert, --cert,
// --key), none for the zero Files.
func CLIFlags(f security.Files) []string {
	if !f.Enabled() {
		return nil
	}
	return []string{"--cacert", f.CA, "--cert", f.Cert, "--key", f.Key}
}

// SetKeyring writes keys (primary first) to n's keyring file
// (<dir>/<id>.keyring) and points --gossip-keyring-file at it; nil keys
// drop the flag (gossip in the clear), giving a TLS node
// --insecure-gossip, without which it refuses to start (unsafe: for
// tests of unauthenticated gossip). Call it before Start.
func SetKeyring(n *Node, keys [][]byte) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.Args = withoutFlags(n.Args, "--gossip-keyring-file")
	n.Args = slices.DeleteFunc(n.Args, func(a string) bool { return a == "--insecure-gossip" })
	if keys == nil {
		n.Keyring = ""
		if n.TLS.Enabled() {
			n.Args = append(n.Args, "--insecure-gossip")
		}
		return nil
	}
	f := filepath.Join(filepath.Dir(n.DataDir), n.ID+".keyring")
	if err := security.SaveKeyringFile(f, keys); err != nil {
		return err
	}
	n.Keyring = f
	n.Args = append(n.Args, "--gossip-keyring-file", f)
	return nil
}

// DatasetRoot is the repository's datasets/ directory (absolute), found
// above the working directory or beside the binary's directory (bin/..),
// or "" if there is none. Nodes confine jobs' dataset paths to their
// --dataset-root directories; the demo, the tests and the benchmarks
// submit jobs naming datasets/fashion-mnist, so their nodes get it.
func DatasetRoot() string {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if exe, err := os.Executable(); err == nil {
		starts = append(starts, filepath.Dir(filepath.Dir(exe)))
	}
	for _, d := range starts {
		for {
			cand := filepath.Join(d, "datasets", "fashion-mnist")
			if fi, err := os.Stat(cand); err == nil && fi.IsDir() {
				return filepath.Join(d, "datasets")
			}
			parent := filepath.Dir(d)
			if parent == d {
				break
			}
			d = parent
		}
	}
	return ""
}

// withoutFlags drops --insecure and each of names with its value.
func withoutFlags(args []string, names ...string) []string {
	out := args[:0:0]
	for i := 0; i < len(args); i++ {
		switch {
		case args[i] == "--insecure":
		case slices.Contains(names, args[i]) && i+1 < len(args):
			i++
		default:
			out = append(out, args[i])
		}
	}
	return out
}
