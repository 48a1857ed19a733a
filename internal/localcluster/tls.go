package localcluster

import (
	"path/filepath"

	"github.com/raftps/raftps/security"
)

// Secure makes a CA and certificates in dir (security.Dev: one node
// certificate per node, IP 127.0.0.1 and DNS localhost, and an admin
// client certificate) and adds the --tls-* flags to each node's command
// line. It returns the admin's files (the clients' --cacert, --cert,
// --key). Call it before Start, after New and Add.
func Secure(dir string, nodes []*Node) (admin security.Files, err error) {
	ids := make([]string, len(nodes))
	for i, n := range nodes {
		ids[i] = n.ID
	}
	files, admin, err := security.Dev(dir, ids)
	if err != nil {
		return security.Files{}, err
	}
	for _, n := range nodes {
		n.mu.Lock()
		f := files[n.ID]
		n.Args = append(n.Args, "--tls-ca-file", f.CA, "--tls-cert-file", f.Cert, "--tls-key-file", f.Key)
		n.mu.Unlock()
	}
	return admin, nil
}

// SecureNode issues a node certificate for n with the CA Secure wrote in
// dir, and adds its --tls-* flags (a node added later with Add).
func SecureNode(dir string, n *Node) error {
	ca, err := security.LoadCA(filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem"))
	if err != nil {
		return err
	}
	files, err := security.IssueDev(ca, dir, n.ID)
	if err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.Args = append(n.Args, "--tls-ca-file", files.CA, "--tls-cert-file", files.Cert, "--tls-key-file", files.Key)
	return nil
}
