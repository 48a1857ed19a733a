package dashboard_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/dashboard"
	"github.com/raftps/raftps/gossip"
	"github.com/raftps/raftps/internal/testing/nodetest"
	"github.com/raftps/raftps/internal/testing/testutil"
	"github.com/raftps/raftps/node"
	"github.com/raftps/raftps/raftstore/client"
	"github.com/raftps/raftps/trainer/model"
)

// externalURL finds what would make a browser leave the node: a URL with
// a scheme (http://, https://, ws://, ...) or a protocol-relative
// reference (src="//host", url(//host)).
var externalURL = regexp.MustCompile(`(?i)\b[a-z][a-z0-9+.-]*://|(?:src|href|action|url)\s*[=(]\s*["']?//`)

func TestExternalURLPattern(t *testing.T) {
	for _, s := range []string{`x="https://cdn.example/x.js"`, `fetch("http://10.0.0.1/")`, `new WebSocket("wss://h")`,
		`<script src="//cdn.example/a.js">`, `background: url(//h/x.png)`} {
		if !externalURL.MatchString(s) {
			t.Errorf("the scanner misses %s", s)
		}
	}
	for _, s := range []string{`href="ui/style.css"`, `location.protocol + "//" + addr`, `// a comment`, `fetch("api/cluster")`} {
		if externalURL.MatchString(s) {
			t.Errorf("the scanner flags %s", s)
		}
	}
}

// TestAssetsNameNoExternalURL scans every embedded file: an air-gapped
// cluster must see the same page, and nothing may be fetched elsewhere.
func TestAssetsNameNoExternalURL(t *testing.T) {
	var files, bytes int
	err := fs.WalkDir(dashboard.Assets(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(dashboard.Assets(), path)
		if err != nil {
			return err
		}
		files++
		bytes += len(b)
		for _, loc := range externalURL.FindAllIndex(b, -1) {
			lo, hi := max(loc[0]-40, 0), min(loc[1]+40, len(b))
			t.Errorf("%s names an external URL at byte %d: …%s…", path, loc[0], b[lo:hi])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"index.html", "app.js", "style.css", "vendor/uplot/uPlot.iife.min.js", "vendor/uplot/LICENSE"} {
		if _, err := fs.Stat(dashboard.Assets(), want); err != nil {
			t.Errorf("embedded asset %s: %v", want, err)
		}
	}
	t.Logf("%d embedded files, %d bytes", files, bytes)
}

// openNode opens an in-process node with roles on loopback and waits for
// it to lead.
func openNode(t *testing.T, roles ...string) *node.Node {
	t.Helper()
	return nodetest.Open(t, "n1", roles, nil)
}

// smallSpec is a job of records Fashion-MNIST records in tasks of 250.
func smallSpec(t *testing.T, name string, records int64, passes int32) *pb.JobSpec {
	t.Helper()
	root, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	spec := &pb.JobSpec{Name: name, Model: &pb.ModelSpec{Name: "mlp", Hidden: []int32{16}},
		Dataset:        &pb.DatasetSpec{Path: filepath.Join(root, "datasets", "fashion-mnist"), Format: "fashion-mnist", Records: records},
		RecordsPerTask: 250, Passes: passes, BatchSize: 50, NumPservers: 1, Mode: pb.UpdateMode_UPDATE_MODE_SYNC,
		Optimizer:  &pb.OptimizerSpec{Name: "momentum", LearningRate: 0.05, Momentum: 0.9},
		Checkpoint: &pb.CheckpointPolicy{EverySteps: 5, KeepMax: 2, Replicas: 1}, Seed: 1}
	m, err := model.Build(spec.Model, 28*28, 10)
	if err != nil {
		t.Fatal(err)
	}
	spec.Params = m.Params()
	return spec
}

func submit(t *testing.T, cl *client.Client, spec *pb.JobSpec) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cl.Master.SubmitJob(ctx, &pb.SubmitJobRequest{Spec: spec}); err != nil {
		t.Fatalf("submit %s: %v", spec.Name, err)
	}
}

type apiResp struct {
	status int
	header http.Header
	body   []byte
}

func call(t *testing.T, method, url string, header ...string) apiResp {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return apiResp{status: resp.StatusCode, header: resp.Header, body: b}
}

func decode[T any](t *testing.T, r apiResp) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
	return v
}

// TestAPI drives the dashboard's HTTP API on a real (in-process,
// server-only) node: the page and its assets, the cluster and jobs views,
// errors with their HTTP status, writes needing the header, cancel and
// delete, and the job's event stream.
func TestAPI(t *testing.T) {
	n := openNode(t, gossip.RoleServer)
	base := "http://" + n.HTTPAddr()
	cl, err := client.New([]string{n.GRPCAddr()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// No trainer or pserver: the job waits, running, for them.
	submit(t, cl, smallSpec(t, "waiting", 1000, 1))

	page := call(t, "GET", base+"/")
	if page.status != 200 || !strings.HasPrefix(page.header.Get("Content-Type"), "text/html") || !strings.Contains(string(page.body), `src="ui/app.js"`) {
		t.Fatalf("GET /: %d %s\n%s", page.status, page.header.Get("Content-Type"), page.body)
	}
	if csp := page.header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
		t.Errorf("Content-Security-Policy %q", csp)
	}
	for _, p := range []string{"/ui/app.js", "/ui/style.css", "/ui/vendor/uplot/uPlot.iife.min.js", "/ui/vendor/uplot/uPlot.min.css"} {
		if r := call(t, "GET", base+p); r.status != 200 || len(r.body) == 0 {
			t.Errorf("GET %s: %d, %d bytes", p, r.status, len(r.body))
		}
	}
	if r := call(t, "GET", base+"/ui/nope.js"); r.status != 404 {
		t.Errorf("GET /ui/nope.js: %d, want 404", r.status)
	}
	if r := call(t, "GET", base+"/metrics"); r.status != 200 || !strings.Contains(string(r.body), "raftps_raft_state") {
		t.Errorf("/metrics is no longer served beside the dashboard: %d", r.status)
	}

	type cluster struct {
		Node, Leader string
		Members      []struct {
			ID, Status, Suffrage string
			Raft                 *struct{ State string }
		}
	}
	c := decode[cluster](t, call(t, "GET", base+"/api/cluster"))
	if c.Leader != "n1" || c.Node != "n1" || len(c.Members) != 1 || c.Members[0].Raft == nil || c.Members[0].Raft.State != "Leader" ||
		c.Members[0].Status != "alive" || c.Members[0].Suffrage != "voter" {
		t.Errorf("/api/cluster: %+v", c)
	}

	type job struct {
		Name, State string
		TotalTasks  int64 `json:"total_tasks"`
		Todo        int64
	}
	jobs := decode[[]job](t, call(t, "GET", base+"/api/jobs"))
	if len(jobs) != 1 || jobs[0].Name != "waiting" || jobs[0].State != "running" || jobs[0].TotalTasks != 4 || jobs[0].Todo != 4 {
		t.Errorf("/api/jobs: %+v", jobs)
	}

	type apiErr struct{ Error, Code string }
	r := call(t, "GET", base+"/api/jobs/nope")
	if e := decode[apiErr](t, r); r.status != 404 || e.Code != "NotFound" || !strings.Contains(e.Error, "nope") {
		t.Errorf("GET /api/jobs/nope: %d %+v", r.status, e)
	}
	if r := call(t, "POST", base+"/api/jobs/waiting/cancel"); r.status != 403 {
		t.Errorf("cancel without %s: %d, want 403", "X-Raftps-Request", r.status)
	}
	r = call(t, "POST", base+"/api/jobs/waiting/delete", "X-Raftps-Request", "1")
	if e := decode[apiErr](t, r); r.status != 409 || e.Code != "FailedPrecondition" {
		t.Errorf("delete a running job: %d %+v, want 409 FailedPrecondition", r.status, e)
	}
	if r := call(t, "POST", base+"/api/jobs/waiting/checkpoints/x/verify", "X-Raftps-Request", "1"); r.status != 400 {
		t.Errorf("verify version x: %d, want 400", r.status)
	}
	if r := call(t, "GET", base+"/api/jobs/waiting/cancel"); r.status != 405 {
		t.Errorf("GET on cancel: %d, want 405", r.status)
	}

	// The event stream starts with the job's status, then its events from seq 1.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/api/jobs/waiting/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("events Content-Type %q", ct)
	}
	events := sseReader(resp.Body)
	if ev := events(); ev.name != "status" || !strings.Contains(ev.data, `"state":"running"`) {
		t.Fatalf("first event %+v, want the status", ev)
	}
	ev := events()
	for ev.name == "cluster" {
		ev = events()
	}
	if ev.name != "job" || ev.id != "1" || !strings.Contains(ev.data, `"type":"job_submitted"`) {
		t.Fatalf("first job event %+v, want seq 1 job_submitted", ev)
	}

	// Cancel: the stream shows the end and the new state.
	r = call(t, "POST", base+"/api/jobs/waiting/cancel", "X-Raftps-Request", "1")
	if j := decode[job](t, r); r.status != 200 || j.State != "cancelled" {
		t.Fatalf("cancel: %d %s", r.status, r.body)
	}
	sawEnd, sawState := false, false
	for !(sawEnd && sawState) {
		ev := events()
		if ev.name == "" {
			t.Fatalf("stream ended before the cancel showed (end %v, state %v)", sawEnd, sawState)
		}
		sawEnd = sawEnd || (ev.name == "job" && strings.Contains(ev.data, `"type":"job_ended"`))
		sawState = sawState || (ev.name == "status" && strings.Contains(ev.data, `"state":"cancelled"`))
	}
	if r := call(t, "POST", base+"/api/jobs/waiting/delete", "X-Raftps-Request", "1"); r.status != 200 {
		t.Fatalf("delete a cancelled job: %d %s", r.status, r.body)
	}
	// The open stream says the job is gone, and ends.
	for {
		ev := events()
		if ev.name == "gone" {
			break
		}
		if ev.name == "" {
			t.Fatal("stream ended without a gone event after delete")
		}
	}
	if r := call(t, "GET", base+"/api/jobs/waiting"); r.status != 404 {
		t.Errorf("GET a deleted job: %d, want 404", r.status)
	}
}

// TestReadOnly: a read-only dashboard refuses every write.
func TestReadOnly(t *testing.T) {
	n := openNode(t, gossip.RoleServer)
	d, err := dashboard.New(dashboard.Config{Endpoints: []string{n.GRPCAddr()}, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	srv := &http.Server{Handler: d}
	lis, err := netListen()
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	defer srv.Close()
	for _, p := range []string{"/api/jobs/j/cancel", "/api/jobs/j/delete", "/api/jobs/j/checkpoints/1/verify"} {
		if r := call(t, "POST", "http://"+lis.Addr().String()+p, "X-Raftps-Request", "1"); r.status != 403 || !strings.Contains(string(r.body), "read-only") {
			t.Errorf("POST %s on a read-only dashboard: %d %s", p, r.status, r.body)
		}
	}
	if r := call(t, "GET", "http://"+lis.Addr().String()+"/api/jobs"); r.status != 200 {
		t.Errorf("GET /api/jobs on a read-only dashboard: %d %s", r.status, r.body)
	}
	if _, err := dashboard.New(dashboard.Config{}); err == nil {
		t.Error("New without endpoints succeeded")
	}
}

type sseEvent struct{ name, id, data string }

// sseReader returns a function that reads the next server-sent event
// (name "" at the end of the stream).
func sseReader(r io.Reader) func() sseEvent {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	return func() sseEvent {
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.name != "" {
					return ev
				}
			case strings.HasPrefix(line, "event: "):
				ev.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "id: "):
				ev.id = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "data: "):
				ev.data = strings.TrimPrefix(line, "data: ")
			}
		}
		return sseEvent{}
	}
}
