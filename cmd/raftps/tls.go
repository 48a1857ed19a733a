package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"

	"github.com/raftps/raftps/node"
	"github.com/raftps/raftps/security"
)

// newTLSCmd is `raftps tls ca create` and `raftps tls cert create`
// (Consul's `consul tls`): a cluster CA and the certificates of nodes and
// clients, PEM files of mode 0600 in --dir, never overwriting one.
func newTLSCmd(g *globals) *cobra.Command {
	c := &cobra.Command{Use: "tls", Short: "create the cluster CA and node and client certificates"}
	ca := &cobra.Command{Use: "ca", Short: "the cluster certificate authority"}
	ca.AddCommand(newTLSCACreateCmd(g))
	cert := &cobra.Command{Use: "cert", Short: "node and client certificates"}
	cert.AddCommand(newTLSCertCreateCmd(g))
	c.AddCommand(ca, cert)
	return c
}

// newTLSCACreateCmd is `raftps tls ca create`.
func newTLSCACreateCmd(g *globals) *cobra.Command {
	var (
		dir, name string
		days      int
	)
	c := &cobra.Command{
		Use:   "create",
		Short: "create a CA: <dir>/ca.pem and <dir>/ca-key.pem (keep ca-key.pem off the nodes), and <dir>/gossip.keyring unless it exists",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			certFile, keyFile := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem")
			_, cpem, kpem, err := security.NewCA(name, days)
			if err != nil {
				return err
			}
			if err := writeNew(certFile, cpem, keyFile, kpem); err != nil {
				return err
			}
			keyring, made, err := newGossipKeyring(filepath.Join(dir, GossipKeyringName))
			if err != nil {
				return err
			}
			return g.printer.Object(map[string]any{"ca_cert": certFile, "ca_key": keyFile, "gossip_keyring": keyring}, func(w io.Writer) {
				fmt.Fprintf(w, "==> CA certificate %s\n", certFile)
				fmt.Fprintf(w, "==> CA key %s (mode 0600; keep it off the nodes)\n", keyFile)
				if made {
					fmt.Fprintf(w, "==> gossip keyring %s (mode 0600; copy it to every node: --gossip-keyring-file)\n", keyring)
				} else {
					fmt.Fprintf(w, "==> gossip keyring %s kept (it exists)\n", keyring)
				}
			})
		},
	}
	c.Flags().StringVar(&dir, "dir", ".", "directory to write the files into")
	c.Flags().StringVar(&name, "name", "raftps CA", "the CA's common name")
	c.Flags().IntVar(&days, "days", security.DefaultCADays, "validity in days")
	return c
}

// newTLSCertCreateCmd is `raftps tls cert create`.
func newTLSCertCreateCmd(g *globals) *cobra.Command {
	var (
		caFile, caKey, node, clientName, role, certDir string
		ips, dns, jobs                                 []string
		certDays                                       int
	)
	c := &cobra.Command{
		Use:   "create",
		Short: "create a node (--node ID --ip ... --dns ...) or client (--client NAME --role reader|trainer|admin) certificate",
		Long: `Create a certificate signed by the cluster CA, with its role in a SAN URI
raftps://role/<role>. A node certificate (role node) is for the node's ports and
its dials to other nodes; list every IP and DNS name clients and peers use to
reach it. A client certificate carries admin, trainer or reader; a trainer's
also names its jobs (--job, repeatable; a pattern such as 'exp-*' serves every
job it matches, path.Match), and its name is the trainer id it acts as (Push,
GetTask, /jobs/<job>/trainers/<name>).

  raftps tls cert create --node n1 --ip 10.0.0.1 --dns n1.example
  raftps tls cert create --client alice --role admin
  raftps tls cert create --client ci --role trainer --job mnist
  raftps tls cert create --client exp --role trainer --job 'exp-*'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req, base, err := certRequest(node, clientName, role, ips, dns, jobs)
			if err != nil {
				return err
			}
			if certDays > 0 {
				req.NotAfter = nowPlusDays(certDays)
			}
			authority, err := security.LoadCA(caFile, caKey)
			if err != nil {
				return err
			}
			cpem, kpem, err := authority.Issue(req)
			if err != nil {
				return err
			}
			certFile, keyFile := filepath.Join(certDir, base+".pem"), filepath.Join(certDir, base+"-key.pem")
			if err := writeNew(certFile, cpem, keyFile, kpem); err != nil {
				return err
			}
			return g.printer.Object(map[string]any{"cert": certFile, "key": keyFile, "role": req.Role, "name": req.Name}, func(w io.Writer) {
				fmt.Fprintf(w, "==> %s certificate %s (role %s)\n", req.Name, certFile, req.Role)
				fmt.Fprintf(w, "==> %s key %s (mode 0600)\n", req.Name, keyFile)
			})
		},
	}
	f := c.Flags()
	f.StringVar(&caFile, "ca", "ca.pem", "CA certificate file")
	f.StringVar(&caKey, "ca-key", "ca-key.pem", "CA key file")
	f.StringVar(&node, "node", "", "node ID: a node certificate (role node)")
	f.StringVar(&clientName, "client", "", "client name: a client certificate (with --role)")
	f.StringVar(&role, "role", "", "client role: "+strings.Join(security.ClientRoles(), ", "))
	f.StringSliceVar(&ips, "ip", nil, "IP addresses of the node (repeatable; default 127.0.0.1)")
	f.StringSliceVar(&dns, "dns", nil, "DNS names of the node (repeatable; default localhost)")
	f.StringSliceVar(&jobs, "job", nil, "jobs a trainer certificate may serve (repeatable); a pattern such as 'exp-*' serves every job it matches")
	f.StringVar(&certDir, "dir", ".", "directory to write <name>.pem and <name>-key.pem into")
	f.IntVar(&certDays, "days", security.DefaultCertDays, "validity in days")
	return c
}

// ErrCertRequest: the flags of `tls cert create` do not describe one certificate.
var ErrCertRequest = errors.New("tls cert create")

func certRequest(node, clientName, role string, ips, dns, jobs []string) (security.CertRequest, string, error) {
	bad := func(f string, a ...any) (security.CertRequest, string, error) {
		return security.CertRequest{}, "", fmt.Errorf("%w: %s", ErrCertRequest, fmt.Sprintf(f, a...))
	}
	switch {
	case (node == "") == (clientName == ""):
		return bad("give one of --node ID or --client NAME")
	case node != "" && role != "":
		return bad("--role is for --client certificates (a node's role is node)")
	case node != "" && len(jobs) > 0:
		return bad("--job is for trainer certificates")
	case clientName != "" && !slices.Contains(security.ClientRoles(), role):
		return bad("--client needs --role %s (got %q)", strings.Join(security.ClientRoles(), "|"), role)
	case clientName != "" && (len(ips) > 0 || len(dns) > 0):
		return bad("--ip and --dns are for --node certificates")
	case role != security.RoleTrainer && len(jobs) > 0:
		return bad("--job is for --role trainer")
	}
	for _, j := range jobs {
		if !security.ValidJob(j) {
			return bad("--job %q: give a job name or a pattern such as 'exp-*' (path.Match; no / %% ? # @ : or \\)", j)
		}
	}
	if clientName != "" {
		return security.CertRequest{Name: clientName, Role: role, Jobs: jobs}, clientName, nil
	}
	req := security.CertRequest{Name: node, Role: security.RoleNode, DNS: dns}
	if len(ips) == 0 && len(dns) == 0 {
		ips, req.DNS = []string{"127.0.0.1"}, []string{"localhost"}
	}
	for _, s := range ips {
		ip := net.ParseIP(s)
		if ip == nil {
			return bad("--ip %q is not an IP address", s)
		}
		req.IPs = append(req.IPs, ip)
	}
	return req, node, nil
}

// writeNew writes a certificate and its key, both 0600, refusing to
// overwrite either (nothing is written then).
func writeNew(certFile string, cpem []byte, keyFile string, kpem []byte) error {
	for _, f := range []string{certFile, keyFile} {
		if fileExists(f) {
			return fmt.Errorf("%w: %s (remove it first; nothing was written)", security.ErrExists, f)
		}
	}
	if err := security.WriteFile(keyFile, kpem, false); err != nil {
		return err
	}
	return security.WriteFile(certFile, cpem, false)
}

// GossipKeyringName is the gossip keyring `tls ca create` writes beside
// the CA: every TLS node needs one (--gossip-keyring-file).
const GossipKeyringName = "gossip.keyring"

// newGossipKeyring writes a keyring of one new key to path (mode 0600)
// unless a file is there; made says whether it wrote one.
func newGossipKeyring(path string) (string, bool, error) {
	if fileExists(path) {
		return path, false, nil
	}
	return path, true, security.NewKeyringFile(path)
}

// clientTLS are the client flags --cacert, --cert and --key (etcdctl's;
// RAFTPS_CACERT, RAFTPS_CERT, RAFTPS_KEY).
type clientTLS struct {
	files security.Files
}

func (t *clientTLS) dialOptions() ([]grpc.DialOption, error) {
	if !t.files.Enabled() {
		return nil, nil
	}
	if err := t.files.Validate(); err != nil {
		return nil, fmt.Errorf("--cacert, --cert and --key go together: %w", err)
	}
	m, err := security.Load(t.files, nil)
	if err != nil {
		return nil, err
	}
	return m.DialOptions(), nil
}

func fileExists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

func nowPlusDays(d int) time.Time { return time.Now().Add(time.Duration(d) * 24 * time.Hour) }

// nodeEnvFlags are the node's flags that read their RAFTPS_* variable.
var nodeEnvFlags = []string{"tls-ca-file", "tls-cert-file", "tls-key-file"}

// tlsFlagsFromEnv sets the node's --tls-* flags not given from
// RAFTPS_TLS_CA_FILE, RAFTPS_TLS_CERT_FILE and RAFTPS_TLS_KEY_FILE.
func tlsFlagsFromEnv(fs *pflag.FlagSet) error {
	sub := pflag.NewFlagSet("tls", pflag.ContinueOnError)
	for _, name := range nodeEnvFlags {
		if f := fs.Lookup(name); f != nil {
			sub.AddFlag(f)
		}
	}
	return flagsFromEnv(sub)
}

// ErrNoTLS: `raftps node` without TLS material and without --insecure.
var ErrNoTLS = errors.New("no TLS material")

// checkInsecure applies the secure default: a node needs its TLS
// material, or --insecure said explicitly (then a warning).
func checkInsecure(cfg node.Config, insecure bool, log *slog.Logger) error {
	switch {
	case cfg.TLS.Enabled() && insecure:
		return fmt.Errorf("--insecure with --tls-* files: give one or the other")
	case !cfg.TLS.Enabled() && !insecure:
		return fmt.Errorf("%w: give --tls-ca-file, --tls-cert-file and --tls-key-file (make them with `raftps tls ca create` and `raftps tls cert create --node %s`), or --insecure for a throw-away cluster", ErrNoTLS, cfg.ID)
	case insecure:
		log.Warn("running INSECURE (--insecure): no TLS, no authentication, no authorisation; any process that reaches this node's ports can read and change everything")
	case cfg.InsecureGossip:
		log.Warn("gossip INSECURE (--insecure-gossip): no keyring; any process that reaches the gossip port can join it and report members dead (their leases are revoked, their tasks requeued)")
	}
	return nil
}
