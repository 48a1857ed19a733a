package security

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"net/url"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// certWithURIs is a certificate of the pki's CA for name whose SAN URIs
// are uris, spelled exactly as given (x509 writes u.String()).
func (p *pki) certWithURIs(name string, uris ...*url.URL) *x509.Certificate {
	p.t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(p.t, err)
	serial, err := newSerial()
	must(p.t, err)
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, URIs: uris}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca.Cert, key.Public(), p.ca.Key)
	must(p.t, err)
	c, err := x509.ParseCertificate(der)
	must(p.t, err)
	return c
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	must(t, err)
	return u
}

// TestCanonicalRoleURIs (issue 32): only raftps://role/<role> spelled as
// RoleURI spells it gives a role. A certificate of the cluster CA whose
// role URI is spelled otherwise (%-escaped, upper-case scheme, user
// info, a port, a query, a trailing slash, an unknown role) or that
// carries two roles has none, and the Authorizer refuses it even the
// reads. Before, each of these acted as node.
func TestCanonicalRoleURIs(t *testing.T) {
	p := newPKI(t)
	canon := p.certWithURIs("n9", RoleURI(RoleNode))
	if r := RoleOf(canon); r != RoleNode {
		t.Fatalf("canonical node URI: role %q", r)
	}
	if j := JobsOf(p.certWithURIs("t", RoleURI(RoleTrainer), JobURI("mnist"), &url.URL{Scheme: "https", Host: "example.test"})); !slices.Equal(j, []string{"mnist"}) {
		t.Fatalf("canonical job URI beside another scheme: jobs %v", j)
	}
	for name, u := range map[string]*url.URL{
		"escaped":        {Scheme: "raftps", Host: "role", Path: "/node", RawPath: "/%6eode"},
		"upper scheme":   {Scheme: "RAFTPS", Host: "role", Path: "/node"},
		"user info":      {Scheme: "raftps", User: url.User("x"), Host: "role", Path: "/node"},
		"port":           {Scheme: "raftps", Host: "role:1", Path: "/node"},
		"query":          {Scheme: "raftps", Host: "role", Path: "/node", RawQuery: "a=b"},
		"trailing slash": {Scheme: "raftps", Host: "role", Path: "/node/"},
		"upper host":     {Scheme: "raftps", Host: "ROLE", Path: "/node"},
		"unknown role":   {Scheme: "raftps", Host: "role", Path: "/root"},
	} {
		t.Run(name, func(t *testing.T) {
			c := p.certWithURIs("rogue", u)
			if r := RoleOf(c); r != "" {
				t.Fatalf("%s (%s): role %q, want none", name, u, r)
			}
			for _, method := range []string{pb.Internal_ForwardApply_FullMethodName, pb.KV_Range_FullMethodName} {
				_, err := (&Authorizer{}).UnaryInterceptor()(callCtx(c), &pb.RangeRequest{Key: []byte("/x")}, &grpc.UnaryServerInfo{FullMethod: method},
					func(context.Context, any) (any, error) { return nil, nil })
				if status.Code(err) != codes.PermissionDenied {
					t.Fatalf("%s (%s) on %s: %v, want PermissionDenied", name, u, method, err)
				}
			}
		})
	}
	if r := RoleOf(p.certWithURIs("two", RoleURI(RoleReader), RoleURI(RoleNode))); r != "" {
		t.Fatalf("two roles: %q, want none", r)
	}
	if j := JobsOf(p.certWithURIs("t", RoleURI(RoleTrainer), mustURL(t, "raftps://job/a%2fb"))); j != nil {
		t.Fatalf("escaped job: %v, want none", j)
	}
}

// TestTrainerListJobsFiltered (issue 32 hole 8): a trainer's ListJobs
// answer lists its jobs only; a reader's lists every job.
func TestTrainerListJobsFiltered(t *testing.T) {
	p := newPKI(t)
	trainer := mustLoad(t, p.issue("ci", CertRequest{Role: RoleTrainer, Jobs: []string{"mnist"}})).Leaf()
	reader := mustLoad(t, p.issue("bob", CertRequest{Role: RoleReader})).Leaf()
	list := func(c *x509.Certificate) []string {
		resp, err := (&Authorizer{}).UnaryInterceptor()(callCtx(c), &pb.ListJobsRequest{}, &grpc.UnaryServerInfo{FullMethod: pb.Master_ListJobs_FullMethodName},
			func(context.Context, any) (any, error) {
				return &pb.ListJobsResponse{Jobs: []*pb.JobStatus{{Name: "cifar"}, {Name: "mnist"}}}, nil
			})
		must(t, err)
		var names []string
		for _, j := range resp.(*pb.ListJobsResponse).Jobs {
			names = append(names, j.Name)
		}
		return names
	}
	if got := list(trainer); !slices.Equal(got, []string{"mnist"}) {
		t.Errorf("trainer of mnist lists %v, want [mnist]", got)
	}
	if got := list(reader); !slices.Equal(got, []string{"cifar", "mnist"}) {
		t.Errorf("reader lists %v, want both", got)
	}
}
