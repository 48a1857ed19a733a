package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/fsm"
	"github.com/raftps/raftps/internal/testing/localcluster"
	"github.com/raftps/raftps/raftstore/etcdapi"
)

// ctlSystem is one cluster etcdctl talks to: raftps or etcd.
type ctlSystem struct {
	name  string
	eps   []string // every member's client address
	flags []string // etcdctl's TLS flags (--cacert, --cert, --key); none for plaintext
}

// ctlStep is one etcdctl invocation's normalized outcome.
type ctlStep struct {
	what, out string
}

var (
	reAddr   = regexp.MustCompile(`127\.0\.0\.1:\d+`)
	reHexID  = regexp.MustCompile(`\b[0-9a-f]{16}\b`)
	reTook   = regexp.MustCompile(`took = [0-9.]+[a-zµ]*s`)
	reRemain = regexp.MustCompile(`remaining\((\d+)s\)`)
)

// normalize hides what legitimately differs between two clusters:
// addresses, 64-bit ids (members, leases) and latencies.
func normalize(s string) string {
	s = reAddr.ReplaceAllString(s, "ADDR")
	s = reHexID.ReplaceAllString(s, "ID")
	return reTook.ReplaceAllString(s, "took = T")
}

// ctlScript runs the etcdctl sequence against sys and returns the
// normalized transcript. Values that the script needs from earlier
// answers (a revision, a lease id) are read from sys's own answers.
func ctlScript(t *testing.T, sys ctlSystem) []ctlStep {
	t.Helper()
	one := sys.eps[:1]
	var steps []ctlStep
	run := func(what string, eps []string, stdin string, args ...string) string {
		t.Helper()
		out, errOut, err := etcdctl(t, sys.flags, eps, stdin, args...)
		rec := normalize(out)
		if err != nil {
			lines := strings.Split(strings.TrimSpace(errOut), "\n")
			rec += "ERROR: " + normalize(lines[len(lines)-1])
		}
		steps = append(steps, ctlStep{what, rec})
		return out
	}
	revision := func() int64 {
		out, errOut, err := etcdctl(t, sys.flags, one, "", "get", "/ctl/a", "-w", "json")
		var r struct {
			Header struct{ Revision int64 } `json:"header"`
		}
		if err != nil || json.Unmarshal([]byte(out), &r) != nil || r.Header.Revision == 0 {
			t.Fatalf("%s: get -w json: %v %s %s", sys.name, err, out, errOut)
		}
		return r.Header.Revision
	}

	run("put a", one, "", "put", "/ctl/a", "1")
	run("put b", sys.eps, "", "put", "/ctl/b", "2")
	rev := revision()
	run("put a again", one, "", "put", "/ctl/a", "1b")
	run("get --prefix", sys.eps, "", "get", "/ctl/", "--prefix")
	run("get --rev", one, "", "get", "/ctl/", "--prefix", fmt.Sprintf("--rev=%d", rev))
	run("get --rev (future)", one, "", "get", "/ctl/a", fmt.Sprintf("--rev=%d", rev+1000))
	run("del", one, "", "del", "/ctl/b")
	run("del (nothing)", one, "", "del", "/ctl/b")
	run("txn -i (success)", one, "value(\"/ctl/a\") = \"1b\"\n\nput /ctl/t yes\nget /ctl/a\n\nput /ctl/t no\n\n", "txn", "-i")
	run("txn -i (failure)", one, "version(\"/ctl/a\") = \"1\"\n\nput /ctl/t yes\n\nget /ctl/t\ndel /ctl/t\n\n", "txn", "-i")

	// watch in one process, a put from another.
	from := revision() + 1
	watchOut := ctlWatch(t, sys, from, func() { run("put (watched)", sys.eps[1:2], "", "put", "/ctl/w/1", "x") })
	steps = append(steps, ctlStep{"watch --rev", normalize(watchOut)})

	// leases
	grant := run("lease grant", one, "", "lease", "grant", "60")
	f := strings.Fields(grant)
	if len(f) < 2 {
		t.Fatalf("%s: lease grant printed %q", sys.name, grant)
	}
	id := f[1]
	run("put --lease", one, "", "put", "/ctl/l", "v", "--lease="+id)
	run("lease keep-alive --once", sys.eps[1:2], "", "lease", "keep-alive", "--once", id)
	ttl := run("lease timetolive --keys", one, "", "lease", "timetolive", id, "--keys")
	if m := reRemain.FindStringSubmatch(ttl); m == nil {
		t.Errorf("%s: timetolive %q has no remaining(...)", sys.name, ttl)
	} else if r, _ := strconv.Atoi(m[1]); r < 50 || r > 60 {
		t.Errorf("%s: remaining %ds of a 60 s lease just kept alive", sys.name, r)
	}
	steps[len(steps)-1].out = reRemain.ReplaceAllString(steps[len(steps)-1].out, "remaining(R)")
	run("lease revoke", one, "", "lease", "revoke", id)
	run("get (revoked lease's key)", one, "", "get", "/ctl/l")
	run("lease timetolive (revoked)", one, "", "lease", "timetolive", id)
	run("lease revoke (again)", one, "", "lease", "revoke", id)
	run("put --lease (revoked)", one, "", "put", "/ctl/l", "v", "--lease="+id)

	// cluster
	members := run("member list", one, "", "member", "list")
	steps[len(steps)-1].out = memberListShape(t, sys, members)
	status := run("endpoint status --cluster", one, "", "endpoint", "status", "--cluster")
	steps[len(steps)-1].out = endpointStatusShape(t, sys, status)
	// etcdctl 3.4 prints health to stderr.
	hout, herr, err := etcdctl(t, sys.flags, sys.eps, "", "endpoint", "health")
	if err != nil {
		t.Errorf("%s: endpoint health: %v\n%s", sys.name, err, herr)
	}
	steps = append(steps, ctlStep{"endpoint health", sortedLines(normalize(hout + herr))})

	snap := filepath.Join(t.TempDir(), "snap.db")
	run("snapshot save", one, "", "snapshot", "save", snap)
	steps[len(steps)-1].out = strings.ReplaceAll(steps[len(steps)-1].out, snap, "FILE")
	b, err := os.ReadFile(snap)
	if err != nil || len(b) == 0 {
		t.Errorf("%s: snapshot file: %d bytes, %v", sys.name, len(b), err)
	} else if sys.name == "raftps" {
		checkRaftpsSnapshot(t, b)
	}
	return steps
}

// checkRaftpsSnapshot: the file `etcdctl snapshot save` wrote from raftps
// is raftps' FSM snapshot and restores the keys the script left.
func checkRaftpsSnapshot(t *testing.T, b []byte) {
	t.Helper()
	body, err := etcdapi.ParseSnapshot(b)
	if err != nil {
		t.Fatalf("raftps snapshot: %v", err)
	}
	f := fsm.New(nil)
	if err := f.Restore(io.NopCloser(bytes.NewReader(body))); err != nil {
		t.Fatalf("raftps snapshot restore: %v", err)
	}
	r, err := f.Range(&pb.RangeRequest{Key: []byte("/ctl/"), RangeEnd: []byte("/ctl0")})
	if err != nil || len(r.Kvs) != 2 || string(r.Kvs[0].Value) != "1b" || string(r.Kvs[1].Key) != "/ctl/w/1" {
		t.Fatalf("restored raftps snapshot: %v %v", r, err)
	}
}

// ctlWatch runs `etcdctl watch /ctl/w --prefix --rev from` in its own
// process, calls put, and returns what the watch printed once it printed
// the put (or after 15 s).
func ctlWatch(t *testing.T, sys ctlSystem, from int64, put func()) string {
	t.Helper()
	args := append(append([]string{"--endpoints", sys.eps[0]}, sys.flags...), "watch", "/ctl/w", "--prefix", fmt.Sprintf("--rev=%d", from))
	cmd := exec.Command("etcdctl", args...)
	cmd.Env = append(cmd.Environ(), "ETCDCTL_API=3")
	var mu sync.Mutex
	var buf bytes.Buffer
	cmd.Stdout = writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	})
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	put()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		s := buf.String()
		mu.Unlock()
		if strings.Count(s, "\n") >= 3 {
			return s
		}
		time.Sleep(50 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	return buf.String()
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func sortedLines(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// memberListShape checks `member list` names len(sys.eps) started voting
// members with one peer and one client URL each, the client URLs being
// sys's endpoints, and returns the lines with ids, names and URLs hidden.
func memberListShape(t *testing.T, sys ctlSystem, out string) string {
	t.Helper()
	var shape []string
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Split(line, ", ")
		if len(f) != 6 {
			t.Errorf("%s: member list line %q", sys.name, line)
			continue
		}
		// https:// from raftps under mutual TLS (else etcdctl's
		// --cluster dials it in plaintext), http:// from etcd here.
		scheme := "http://"
		if len(sys.flags) > 0 {
			scheme = "https://"
		}
		if !strings.HasPrefix(f[4], scheme) {
			t.Errorf("%s: member list client URL %s, want %s", sys.name, f[4], scheme)
		}
		seen[strings.TrimPrefix(f[4], scheme)] = true
		shape = append(shape, strings.Join([]string{"ID", f[1], "NAME", "PEER", "CLIENT", f[5]}, ", "))
	}
	for _, ep := range sys.eps {
		if !seen[ep] {
			t.Errorf("%s: member list has no client URL %s:\n%s", sys.name, ep, out)
		}
	}
	return strings.Join(shape, "\n")
}

// endpointStatusShape checks `endpoint status --cluster` has a line per
// member and one leader, and returns per line what must agree (is leader,
// is learner, errors), sorted.
func endpointStatusShape(t *testing.T, sys ctlSystem, out string) string {
	t.Helper()
	var shape []string
	leaders := 0
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Split(line, ", ")
		if len(f) < 9 {
			t.Errorf("%s: endpoint status line %q", sys.name, line)
			continue
		}
		if f[4] == "true" {
			leaders++
		}
		shape = append(shape, strings.Join([]string{"ENDPOINT", "ID", "VERSION", "DBSIZE", f[4], f[5], "TERM", "INDEX", "APPLIED", strings.Join(f[9:], ", ")}, ", "))
	}
	if len(shape) != len(sys.eps) || leaders != 1 {
		t.Errorf("%s: endpoint status: %d lines, %d leaders:\n%s", sys.name, len(shape), leaders, out)
	}
	sort.Strings(shape)
	return strings.Join(shape, "\n")
}

// TestEtcdctlAgainstRaftpsAndEtcd runs Debian's etcdctl through the same
// sequence against a 3-node raftps cluster and a 3-node etcd started
// here, and requires the same output from both, ids, addresses and
// timings aside.
func TestEtcdctlAgainstRaftpsAndEtcd(t *testing.T) {
	ensureEtcdTools(t)
	c := NewCluster(t, binPath, 3)
	c.StartAll()
	mustLeader(t, c, 20*time.Second)
	etcdEps := startEtcd(t, 3)

	got := ctlScript(t, ctlSystem{name: "raftps", eps: grpcEndpoints(c), flags: localcluster.CLIFlags(c.Admin())})
	want := ctlScript(t, ctlSystem{name: "etcd", eps: etcdEps})
	if len(got) != len(want) {
		t.Fatalf("raftps transcript has %d steps, etcd's %d", len(got), len(want))
	}
	for i := range want {
		if got[i].out != want[i].out {
			t.Errorf("etcdctl %s:\n--- raftps ---\n%s\n--- etcd ---\n%s", want[i].what, got[i].out, want[i].out)
		} else {
			t.Logf("etcdctl %s: same output:\n%s", want[i].what, strings.TrimRight(got[i].out, "\n"))
		}
	}
}
