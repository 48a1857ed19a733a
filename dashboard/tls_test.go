package dashboard_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raftps/raftps/dashboard"
	"github.com/raftps/raftps/gossip"
	"github.com/raftps/raftps/internal/testing/nodetest"
	"github.com/raftps/raftps/node"
	"github.com/raftps/raftps/raftstore/client"
	"github.com/raftps/raftps/security"
)

// pki is a loopback CA with a node certificate n1, and client
// certificates admin, reader and trainer (role trainer, job "waiting"),
// plus an admin certificate of another CA.
type pki struct {
	dir                    string
	node                   security.Files
	admin, reader, trainer security.Files
	otherAdmin             security.Files
}

func newPKI(t *testing.T) pki {
	t.Helper()
	dir := t.TempDir()
	nodes, admin, err := security.Dev(dir, []string{"n1"})
	if err != nil {
		t.Fatal(err)
	}
	ca, err := security.LoadCA(filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	issue := func(name, role string, jobs ...string) security.Files {
		f, err := security.IssueFiles(ca, dir, security.CertRequest{Name: name, Role: role, Jobs: jobs})
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	otherDir := filepath.Join(dir, "other")
	if err := os.Mkdir(otherDir, 0o700); err != nil {
		t.Fatal(err)
	}
	_, other, err := security.Dev(otherDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	return pki{dir: dir, node: nodes["n1"], admin: admin, reader: issue("alice", security.RoleReader),
		trainer: issue("t1", security.RoleTrainer, "waiting"), otherAdmin: other}
}

// openTLSNode opens an in-process server node with mutual TLS on every
// port, the HTTP port included (--http-tls), and waits for it to lead.
func openTLSNode(t *testing.T, p pki) *node.Node {
	t.Helper()
	return nodetest.Open(t, "n1", []string{gossip.RoleServer}, func(cfg *node.Config) {
		cfg.TLS, cfg.HTTPTLS = p.node, true
	})
}

// httpsClient is an HTTPS client (HTTP/2 when the server offers it) that
// trusts the cluster CA in caFile and presents f's certificate (none if
// f.Cert is empty). It checks the server's certificate as any HTTPS
// client does (chain and IP SAN); the role check is the gRPC clients'.
func httpsClient(t *testing.T, caFile string, f security.Files) *http.Client {
	t.Helper()
	pem, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("no CA in %s", caFile)
	}
	cfg := &tls.Config{RootCAs: pool}
	if f.Cert != "" {
		kp, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{kp}
	}
	tr := &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func do(t *testing.T, c *http.Client, method, url string, header ...string) (*http.Response, []byte, error) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

// TestHTTPSClientCertificates: with --http-tls every page and endpoint of
// the HTTP port (the page, its assets, the JSON API, both event streams,
// /metrics, /healthz, /readyz) answers over TLS 1.3 (HTTP/2) to a client
// with a certificate of the cluster CA, and refuses a client without a
// certificate, one with another CA's certificate, and plaintext HTTP.
func TestHTTPSClientCertificates(t *testing.T) {
	p := newPKI(t)
	n := openTLSNode(t, p)
	m, err := security.Load(p.admin, nil)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New([]string{n.GRPCAddr()}, m.DialOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	submit(t, cl, smallSpec(t, "waiting", 1000, 1))
	base := "https://" + n.HTTPAddr()

	paths := []string{"/", "/ui/app.js", "/ui/style.css", "/ui/vendor/uplot/uPlot.iife.min.js", "/ui/vendor/uplot/uPlot.min.css",
		"/api/identity", "/api/cluster", "/api/jobs", "/api/jobs/waiting", "/metrics", "/healthz", "/readyz"}
	streams := []string{"/api/cluster/events", "/api/jobs/waiting/events"}

	for _, who := range []struct {
		name  string
		files security.Files
	}{{"admin", p.admin}, {"reader", p.reader}} { // a trainer may not read the dashboard: TestHTTPSRoles
		c := httpsClient(t, p.admin.CA, who.files)
		// /readyz may answer 503 for a moment after the election.
		deadline := time.Now().Add(10 * time.Second)
		for {
			resp, _, err := do(t, c, "GET", base+"/readyz")
			if err == nil && resp.StatusCode == 200 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: /readyz over HTTPS not 200 within 10 s: %v", who.name, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		for _, path := range paths {
			resp, body, err := do(t, c, "GET", base+path)
			if err != nil {
				t.Errorf("%s: GET %s: %v", who.name, path, err)
				continue
			}
			if resp.StatusCode != 200 || len(body) == 0 {
				t.Errorf("%s: GET %s: %d %s", who.name, path, resp.StatusCode, body)
			}
			if resp.TLS == nil || resp.TLS.Version != tls.VersionTLS13 || resp.ProtoMajor != 2 {
				t.Errorf("%s: GET %s: not TLS 1.3 over HTTP/2: %s %+v", who.name, path, resp.Proto, resp.TLS)
			}
		}
		for _, path := range streams {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			req, _ := http.NewRequestWithContext(ctx, "GET", base+path, nil)
			resp, err := c.Do(req)
			if err != nil {
				cancel()
				t.Errorf("%s: GET %s: %v", who.name, path, err)
				continue
			}
			if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
				t.Errorf("%s: GET %s: %d %s", who.name, path, resp.StatusCode, resp.Header.Get("Content-Type"))
			} else if path == "/api/jobs/waiting/events" {
				// The job's status or its first retained event comes first.
				if ev := sseReader(resp.Body)(); (ev.name != "job" && ev.name != "status") || !strings.Contains(ev.data, "waiting") {
					t.Errorf("%s: GET %s: first event %+v, want the job's status or event", who.name, path, ev)
				}
			} else if line, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
				t.Errorf("%s: GET %s: reading the stream: %v", who.name, path, err)
			} else {
				t.Logf("%s: %s starts %q", who.name, path, line)
			}
			resp.Body.Close()
			cancel()
		}
	}

	// Refused: no certificate, another CA's certificate (the server's
	// certificate is trusted in both), plaintext HTTP. In TLS 1.3 the
	// client finishes its handshake before the server has judged its
	// certificate, so the server's alert (why) is read after it.
	for _, bad := range []struct {
		name  string
		files security.Files
		alert string
	}{
		{"no client certificate", security.Files{}, "certificate required"},
		{"another CA's admin certificate", p.otherAdmin, "unknown certificate authority"},
	} {
		c := httpsClient(t, p.admin.CA, bad.files)
		for _, path := range append(paths, streams...) {
			if resp, body, err := do(t, c, "GET", base+path); err == nil {
				t.Errorf("%s: GET %s answered %d %.100s, want a refused handshake", bad.name, path, resp.StatusCode, body)
			}
		}
		cfg := c.Transport.(*http.Transport).TLSClientConfig.Clone()
		conn, err := tls.Dial("tcp", n.HTTPAddr(), cfg)
		if err != nil {
			t.Fatalf("%s: dial: %v", bad.name, err)
		}
		fmt.Fprintf(conn, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", n.HTTPAddr())
		_, err = conn.Read(make([]byte, 100))
		conn.Close()
		if err == nil || !strings.Contains(err.Error(), bad.alert) {
			t.Errorf("%s: the server's answer: %v, want the alert %q", bad.name, err, bad.alert)
		}
	}
	for _, path := range paths {
		if resp, _, err := do(t, &http.Client{Timeout: 5 * time.Second}, "GET", "http://"+n.HTTPAddr()+path); err == nil && resp.StatusCode == 200 {
			t.Errorf("plaintext GET %s on the HTTPS port: 200", path)
		}
	}
}

// TestHTTPSRoles: over mutual TLS the dashboard authorises by the client
// certificate's role as the gRPC API does: the page is told (GET
// /api/identity) that a reader or trainer may not cancel or delete and an
// admin may; a reader's or trainer's cancel and delete are refused with
// 403 naming the role, and change nothing; an admin's succeed.
func TestHTTPSRoles(t *testing.T) {
	p := newPKI(t)
	n := openTLSNode(t, p)
	m, err := security.Load(p.admin, nil)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New([]string{n.GRPCAddr()}, m.DialOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	submit(t, cl, smallSpec(t, "waiting", 1000, 1))
	base := "https://" + n.HTTPAddr()
	state := func(c *http.Client) string {
		t.Helper()
		resp, body, err := do(t, c, "GET", base+"/api/jobs/waiting")
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET /api/jobs/waiting: %v %s", err, body)
		}
		var j struct{ State string }
		if err := json.Unmarshal(body, &j); err != nil {
			t.Fatal(err)
		}
		return j.State
	}
	type identity struct {
		TLS        bool
		Name, Role string
		Can        map[string]bool
	}
	ident := func(c *http.Client) identity {
		t.Helper()
		resp, body, err := do(t, c, "GET", base+"/api/identity")
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET /api/identity: %v %s", err, body)
		}
		var id identity
		if err := json.Unmarshal(body, &id); err != nil {
			t.Fatal(err)
		}
		return id
	}

	// The dashboard shows every job: a trainer, which reads only its own
	// jobs (issue 32 hole 8), may not read it, not even its own job's page.
	if resp, body, err := do(t, httpsClient(t, p.admin.CA, p.trainer), "GET", base+"/api/jobs/waiting"); err != nil ||
		resp.StatusCode != 403 || !strings.Contains(string(body), "role trainer") {
		t.Errorf("trainer GET /api/jobs/waiting: %v %d %s, want 403 naming role trainer", err, resp.StatusCode, body)
	}
	for _, who := range []struct {
		name, role string
		files      security.Files
	}{{"alice", security.RoleReader, p.reader}, {"t1", security.RoleTrainer, p.trainer}} {
		c := httpsClient(t, p.admin.CA, who.files)
		if who.role == security.RoleReader {
			// Verify hashes a whole checkpoint: admin only (issue 32).
			if id := ident(c); !id.TLS || id.Name != who.name || id.Role != who.role || id.Can["cancel"] || id.Can["delete"] || id.Can["verify"] {
				t.Errorf("%s: /api/identity %+v, want role %s, no cancel, delete or verify", who.role, id, who.role)
			}
		}
		for _, act := range []string{"cancel", "delete"} {
			resp, body, err := do(t, c, "POST", base+"/api/jobs/waiting/"+act, "X-Raftps-Request", "1")
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != 403 || !strings.Contains(string(body), "role "+who.role) || !strings.Contains(string(body), "admin") {
				t.Errorf("%s: %s: %d %s, want 403 naming role %s and the admin role", who.role, act, resp.StatusCode, body, who.role)
			}
		}
		if s := state(httpsClient(t, p.admin.CA, p.reader)); s != "running" {
			t.Fatalf("after the %s's refused cancel the job is %s, want running", who.role, s)
		}
	}

	admin := httpsClient(t, p.admin.CA, p.admin)
	if id := ident(admin); id.Role != security.RoleAdmin || !id.Can["cancel"] || !id.Can["delete"] || !id.Can["verify"] {
		t.Errorf("admin: /api/identity %+v, want every write allowed", id)
	}
	// A write still needs the page's header, whoever sends it.
	if resp, body, err := do(t, admin, "POST", base+"/api/jobs/waiting/cancel"); err != nil || resp.StatusCode != 403 {
		t.Errorf("admin cancel without X-Raftps-Request: %v %s, want 403", err, body)
	}
	if resp, body, err := do(t, admin, "POST", base+"/api/jobs/waiting/cancel", "X-Raftps-Request", "1"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("admin cancel: %v %s", err, body)
	}
	if s := state(admin); s != "cancelled" {
		t.Errorf("after the admin's cancel the job is %s, want cancelled", s)
	}
	if resp, body, err := do(t, admin, "POST", base+"/api/jobs/waiting/delete", "X-Raftps-Request", "1"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("admin delete: %v %s", err, body)
	}
	if resp, _, err := do(t, admin, "GET", base+"/api/jobs/waiting"); err != nil || resp.StatusCode != 404 {
		t.Errorf("GET the deleted job: %v %v, want 404", resp, err)
	}
}

// TestUnverifiedCertificateIsNoIdentity: a certificate the TLS server did
// not verify (a server that only requests one) gives no role: an "admin"
// certificate of another CA is a request without a certificate, refused
// a write by a read-only dashboard, and /api/identity says so.
func TestUnverifiedCertificateIsNoIdentity(t *testing.T) {
	p := newPKI(t)
	n := openNode(t, gossip.RoleServer)
	d, err := dashboard.New(dashboard.Config{Endpoints: []string{n.GRPCAddr()}, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	kp, err := tls.LoadX509KeyPair(p.node.Cert, p.node.Key)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(d)
	srv.TLS = &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{kp}, ClientAuth: tls.RequireAnyClientCert}
	srv.StartTLS()
	defer srv.Close()
	c := httpsClient(t, p.admin.CA, p.otherAdmin)
	resp, body, err := do(t, c, "POST", srv.URL+"/api/jobs/j/cancel", "X-Raftps-Request", "1")
	if err != nil {
		t.Fatal(err)
	}
	if resp.TLS == nil || resp.StatusCode != 403 || !strings.Contains(string(body), "read-only") {
		t.Errorf("cancel with an unverified admin certificate: %d %s, want 403 read-only", resp.StatusCode, body)
	}
	resp, body, err = do(t, c, "GET", srv.URL+"/api/identity")
	if err != nil {
		t.Fatal(err)
	}
	var id struct {
		TLS  bool
		Role string
		Can  map[string]bool
	}
	if err := json.Unmarshal(body, &id); err != nil || resp.StatusCode != 200 || id.TLS || id.Role != "" || id.Can["cancel"] {
		t.Errorf("/api/identity with an unverified certificate: %d %s", resp.StatusCode, body)
	}
}
