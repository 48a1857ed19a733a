package localcluster

import (
	"os"
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
		n.Args = append(withoutInsecure(n.Args), "--tls-ca-file", f.CA, "--tls-cert-file", f.Cert, "--tls-key-file", f.Key)
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
	n.Args = append(withoutInsecure(n.Args), "--tls-ca-file", files.CA, "--tls-cert-file", files.Cert, "--tls-key-file", files.Key)
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

// withoutInsecure drops the --insecure New and Add put on every node.
func withoutInsecure(args []string) []string {
	out := args[:0:0]
	for _, a := range args {
		if a != "--insecure" {
			out = append(out, a)
		}
	}
	return out
}
