package security

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// Roles a certificate can carry, as a SAN URI raftps://role/<role>.
const (
	// RoleNode: a cluster node; the only role the internal APIs (write
	// forwarding, Raft, checkpoint replication, other nodes' pserver
	// slots) accept, and it may do everything.
	RoleNode = "node"
	// RoleAdmin: everything a user can do on the client API.
	RoleAdmin = "admin"
	// RoleTrainer: the task API, pull/push, its own registration keys
	// (/jobs/<job>/trainers/...) and reads, for the jobs its certificate
	// names (raftps://job/<job>).
	RoleTrainer = "trainer"
	// RoleReader: get, watch, status, job and checkpoint listing.
	RoleReader = "reader"
)

// URIScheme is the scheme of the SAN URIs raftps reads from certificates:
// raftps://role/<role> and raftps://job/<job>.
const URIScheme = "raftps"

// ClientRoles are the roles `raftps tls cert create --client` issues.
func ClientRoles() []string { return []string{RoleAdmin, RoleTrainer, RoleReader} }

// ValidRole reports whether r is a known role.
func ValidRole(r string) bool {
	return r == RoleNode || slices.Contains(ClientRoles(), r)
}

// Errors of identity checks.
var (
	ErrNoCertificate = errors.New("security: no client certificate")
	ErrNotNode       = errors.New("security: not a node certificate")
)

// RoleURI is the SAN URI of role r.
func RoleURI(r string) *url.URL { return &url.URL{Scheme: URIScheme, Host: "role", Path: "/" + r} }

// JobURI is the SAN URI that grants a trainer certificate job j.
func JobURI(j string) *url.URL { return &url.URL{Scheme: URIScheme, Host: "job", Path: "/" + j} }

// RoleOf is the role a certificate carries (its first raftps://role/ URI),
// or "" if none.
func RoleOf(c *x509.Certificate) string {
	for _, u := range c.URIs {
		if u.Scheme == URIScheme && u.Host == "role" {
			return strings.TrimPrefix(u.Path, "/")
		}
	}
	return ""
}

// JobsOf are the jobs a certificate names (raftps://job/<job>).
func JobsOf(c *x509.Certificate) []string {
	var jobs []string
	for _, u := range c.URIs {
		if u.Scheme == URIScheme && u.Host == "job" {
			jobs = append(jobs, strings.TrimPrefix(u.Path, "/"))
		}
	}
	return jobs
}

// Identity is who a verified certificate says the peer is.
type Identity struct {
	Name string   // the certificate's common name
	Role string   // RoleOf
	Jobs []string // JobsOf (trainers)
}

// IdentityOf reads the identity of a verified certificate.
func IdentityOf(c *x509.Certificate) Identity {
	return Identity{Name: c.Subject.CommonName, Role: RoleOf(c), Jobs: JobsOf(c)}
}

func (id Identity) String() string {
	if id.Role == "" {
		return fmt.Sprintf("%q (no role)", id.Name)
	}
	return fmt.Sprintf("%q (role %s)", id.Name, id.Role)
}

// HasJob reports whether the identity's certificate names job.
func (id Identity) HasJob(job string) bool { return slices.Contains(id.Jobs, job) }
