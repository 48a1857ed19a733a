package security

import (
	"crypto/x509"
	"encoding/asn1"
	"errors"
	"fmt"
	"net/url"
	"path"
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
	// RoleTrainer: for the jobs its certificate names (raftps://job/<job>)
	// and as the trainer its common name names: the task API, pull/push,
	// its registration key /jobs/<job>/trainers/<name>, reads of those
	// jobs, and the leases it granted.
	RoleTrainer = "trainer"
	// RoleReader: an operator's read-only view: every read of every job
	// (keys, watches, status, checkpoints, leases); no write.
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

// JobURI is the SAN URI that grants a trainer certificate job j: a job
// name or a path.Match pattern of names ("exp-*": every job exp-...), its
// "*", "[" and "]" written as they are.
func JobURI(j string) *url.URL {
	return &url.URL{Scheme: URIScheme, Host: "job", Path: "/" + j, RawPath: "/" + j}
}

// ValidJob reports whether j may be a certificate's job claim: non-empty,
// no "/%?#@:" and, as a pattern, well-formed for path.Match.
func ValidJob(j string) bool {
	if j == "" || strings.ContainsAny(j, "/%?#@:\\") {
		return false
	}
	_, err := path.Match(j, "")
	return err == nil
}

// RoleOf is the role a certificate carries: its one raftps://role/<role>
// SAN URI, spelled exactly as RoleURI spells a known role, or "" (none).
// A certificate with a URI of the raftps scheme in any other spelling
// (RAFTPS://, %-escapes, user info, a port, a query, two roles) has no
// role: x509 normalises what it parses, so the raw SAN is read
// (rawURIs), and only one canonical form acts as a role.
func RoleOf(c *x509.Certificate) string {
	roles, _, ok := raftpsURIs(c)
	if !ok || len(roles) != 1 {
		return ""
	}
	return roles[0]
}

// JobsOf are the jobs a certificate names (raftps://job/<job>, spelled as
// JobURI spells it); none if any raftps URI of it is not canonical.
func JobsOf(c *x509.Certificate) []string {
	_, jobs, ok := raftpsURIs(c)
	if !ok {
		return nil
	}
	return jobs
}

// raftpsURIs splits the certificate's raftps URIs into distinct roles and
// jobs; ok is false if one is not in the canonical form.
func raftpsURIs(c *x509.Certificate) (roles, jobs []string, ok bool) {
	for _, raw := range rawURIs(c) {
		if len(raw) < len(URIScheme)+1 || !strings.EqualFold(raw[:len(URIScheme)+1], URIScheme+":") {
			continue // another scheme: not ours
		}
		switch {
		case strings.HasPrefix(raw, RoleURI("").String()):
			r := strings.TrimPrefix(raw, RoleURI("").String())
			if !ValidRole(r) || RoleURI(r).String() != raw {
				return nil, nil, false
			}
			if !slices.Contains(roles, r) {
				roles = append(roles, r)
			}
		case strings.HasPrefix(raw, JobURI("").String()):
			j := strings.TrimPrefix(raw, JobURI("").String())
			if !ValidJob(j) || JobURI(j).String() != raw {
				return nil, nil, false
			}
			if !slices.Contains(jobs, j) {
				jobs = append(jobs, j)
			}
		default:
			return nil, nil, false
		}
	}
	return roles, jobs, true
}

// oidSAN is the subjectAltName extension (RFC 5280 4.2.1.6).
var oidSAN = asn1.ObjectIdentifier{2, 5, 29, 17}

// rawURIs are the certificate's SAN URIs as the issuer wrote them
// (uniformResourceIdentifier [6] IA5String), unparsed; x509's URIs are
// parsed and normalised (the scheme lower-cased).
func rawURIs(c *x509.Certificate) []string {
	var out []string
	for _, e := range c.Extensions {
		if !e.Id.Equal(oidSAN) {
			continue
		}
		var names []asn1.RawValue
		if rest, err := asn1.Unmarshal(e.Value, &names); err != nil || len(rest) > 0 {
			return nil
		}
		for _, n := range names {
			if n.Class == asn1.ClassContextSpecific && n.Tag == 6 {
				out = append(out, string(n.Bytes))
			}
		}
	}
	return out
}

// Identity is who a verified certificate says the peer is.
type Identity struct {
	Name string   // the certificate's common name
	Role string   // RoleOf
	Jobs []string // JobsOf (trainers): names or path.Match patterns
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

// HasJob reports whether the identity's certificate names job, or a
// pattern of it matches job (path.Match: "exp-*" serves exp-1, exp-2...).
func (id Identity) HasJob(job string) bool {
	return slices.ContainsFunc(id.Jobs, func(p string) bool {
		ok, err := path.Match(p, job)
		return err == nil && ok
	})
}
