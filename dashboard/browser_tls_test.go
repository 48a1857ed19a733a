package dashboard_test

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/raftstore/client"
	"github.com/raftps/raftps/security"
)

// The tools the browser test needs beside chromium: certutil and pk12util
// (Debian's libnss3-tools) fill the browser's NSS database, openssl makes
// the PKCS#12 file pk12util imports. scripts/install-chromium.sh installs
// them when missing.
var browserTools = []string{"chromium", "certutil", "pk12util", "openssl"}

// browserToolsReady installs browserTools with scripts/install-chromium.sh
// when one is missing; the test fails (it does not skip) when that fails.
func browserToolsReady(t *testing.T, root string) {
	t.Helper()
	for _, tool := range browserTools {
		if _, err := exec.LookPath(tool); err == nil {
			continue
		}
		if out, err := exec.Command(filepath.Join(root, "scripts", "install-chromium.sh")).CombinedOutput(); err != nil {
			t.Fatalf("%s is missing and scripts/install-chromium.sh failed: %v\n%s", tool, err, out)
		}
		return
	}
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

// browserHome makes a HOME for one Chromium process whose NSS database
// ($HOME/.pki/nssdb, where Chromium on Linux keeps user certificates)
// trusts the cluster CA for TLS servers (so the nodes' certificates are
// verified, not ignored) and holds f's client certificate and key.
func browserHome(t *testing.T, dir string, f security.Files) string {
	t.Helper()
	home := filepath.Join(dir, "home")
	db := filepath.Join(home, ".pki", "nssdb")
	if err := os.MkdirAll(db, 0o700); err != nil {
		t.Fatal(err)
	}
	run(t, "certutil", "-N", "-d", "sql:"+db, "--empty-password")
	run(t, "certutil", "-A", "-d", "sql:"+db, "-n", "raftps-cluster-ca", "-t", "C,,", "-i", f.CA)
	p12 := filepath.Join(dir, "client.p12")
	run(t, "openssl", "pkcs12", "-export", "-in", f.Cert, "-inkey", f.Key, "-out", p12, "-passout", "pass:", "-name", "raftps-client")
	run(t, "pk12util", "-i", p12, "-d", "sql:"+db, "-W", "")
	return home
}

// policyDir is where Chromium on Debian reads its managed policies.
const policyDir = "/etc/chromium/policies/managed"

// autoSelectClientCert writes a managed Chromium policy
// (AutoSelectCertificateForUrls) that answers a TLS server's certificate
// request on https://127.0.0.1 (any port) with the certificate in the
// browser's NSS database issued by the CA in caFile: headless Chromium has
// no one to pick a certificate in its dialog. The file has a name of its
// own (this process's) and is removed when the test ends. Writing it needs
// root (CI runs as root); the test fails saying so otherwise.
func autoSelectClientCert(t *testing.T, caFile string) {
	t.Helper()
	b, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("no PEM in %s", caFile)
	}
	ca, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	rule, _ := json.Marshal(map[string]any{"pattern": "https://127.0.0.1:*",
		"filter": map[string]any{"ISSUER": map[string]string{"CN": ca.Subject.CommonName}}})
	policy, _ := json.Marshal(map[string]any{"AutoSelectCertificateForUrls": []string{string(rule)}})
	if err := os.MkdirAll(policyDir, 0o755); err != nil {
		t.Fatalf("the browser test writes a Chromium policy under %s (as root, as CI runs it): %v", policyDir, err)
	}
	path := filepath.Join(policyDir, fmt.Sprintf("raftps-dashboard-test-%d.json", os.Getpid()))
	if err := os.WriteFile(path, policy, 0o644); err != nil {
		t.Fatalf("the browser test writes a Chromium policy under %s (as root, as CI runs it): %v", policyDir, err)
	}
	t.Cleanup(func() { os.Remove(path) })
	t.Logf("Chromium policy %s: %s", path, policy)
}

// issueClient issues a client certificate (name, role) with the CA in
// dir (ca.pem, ca-key.pem) into dir.
func issueClient(t *testing.T, dir, name, role string) security.Files {
	t.Helper()
	ca, err := security.LoadCA(filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	c, k, err := ca.Issue(security.CertRequest{Name: name, Role: role})
	if err != nil {
		t.Fatal(err)
	}
	f := security.Files{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, name+".pem"), Key: filepath.Join(dir, name+"-key.pem")}
	if err := security.WriteFile(f.Cert, c, true); err != nil {
		t.Fatal(err)
	}
	if err := security.WriteFile(f.Key, k, true); err != nil {
		t.Fatal(err)
	}
	return f
}

// evalPromise evaluates a JavaScript expression that returns a promise
// and decodes the value it resolves to.
func (p page) evalPromise(expr string, out any) error {
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string]("("+expr+").then(v => JSON.stringify(v))", chromedp.EvalAwaitPromise))
	if err != nil {
		return err
	}
	return json.Unmarshal([]byte(s), out)
}

// checkRolesInBrowser: the admin's Jobs page (adminPage, the admin's
// browser) offers delete for the ended job; a reader's browser (its own
// NSS database with a reader certificate) shows the same Jobs page
// without any cancel or delete button, and the server refuses the
// reader's delete sent from that page (403 naming the role reader), the
// job staying. Screenshots jobs-admin.png and jobs-reader.png.
func checkRolesInBrowser(t *testing.T, ctx context.Context, cl *client.Client, browserOpts func(string, security.Files) []chromedp.ExecAllocatorOption,
	adminPage page, base, pkiDir, results string) {
	t.Helper()
	row := fmt.Sprintf(`document.querySelector('#jobs tr[data-job=%q]')`, browserJob)
	if err := chromedp.Do(adminPage.ctx, chromedp.Navigate(base+"#/jobs"), chromedp.WaitVisible(`#jobs tr[data-job]`)); err != nil {
		t.Fatalf("the admin's Jobs page: %v", err)
	}
	if err := adminPage.waitFor("the admin's Jobs page offers delete for the ended job",
		fmt.Sprintf(`raftps.identity.role === "admin" && !!%s && !!%s.querySelector('button[data-act="delete"]')`, row, row),
		100*time.Millisecond, 10*time.Second); err != nil {
		t.Error(err)
	}
	adminPage.screenshot(filepath.Join(results, "jobs-admin.png"))

	reader := issueClient(t, pkiDir, "alice", security.RoleReader)
	actx, acancel := chromedp.NewExecAllocator(ctx, browserOpts("browser-reader", reader)...)
	defer acancel()
	var errs jsErrors
	rctx, rcancel := chromedp.NewContext(actx, chromedp.WithListener(errs.listen))
	defer rcancel()
	if err := chromedp.Do(rctx, chromedp.Navigate(base+"#/jobs"), chromedp.WaitVisible(`#jobs tr[data-job]`)); err != nil {
		t.Fatalf("the reader's Jobs page: %v", err)
	}
	readerPage := page{t: t, ctx: rctx}
	if err := readerPage.waitFor("the reader's Jobs page lists the job, as reader alice",
		fmt.Sprintf(`raftps.identity.role === "reader" && document.querySelector("#who").textContent.includes("alice") && !!%s`, row),
		100*time.Millisecond, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	var buttons int
	if err := readerPage.eval(`document.querySelectorAll("#jobs button").length`, &buttons); err != nil {
		t.Fatal(err)
	}
	if buttons != 0 {
		t.Errorf("the reader's Jobs page shows %d cancel/delete buttons, want none", buttons)
	}
	var refused struct {
		Status int    `json:"status"`
		Error  string `json:"error"`
	}
	if err := readerPage.evalPromise(fmt.Sprintf(`fetch("api/jobs/%s/delete", {method: "POST", headers: {"X-Raftps-Request": "1"}}).then(async r => ({status: r.status, error: (await r.json()).error}))`, browserJob), &refused); err != nil {
		t.Fatal(err)
	}
	if refused.Status != 403 || !strings.Contains(refused.Error, "role reader") {
		t.Errorf("the reader's delete from the page: %d %q, want 403 naming role reader", refused.Status, refused.Error)
	} else {
		t.Logf("the reader's delete from the page: %d %q", refused.Status, refused.Error)
	}
	readerPage.screenshot(filepath.Join(results, "jobs-reader.png"))
	if _, err := cl.Master.GetJob(ctx, &pb.GetJobRequest{Name: browserJob}); err != nil {
		t.Errorf("the job after the reader's refused delete: %v", err)
	}
	for _, e := range errs.get() {
		t.Errorf("JavaScript exception on the reader's page: %s", e)
	}
}
