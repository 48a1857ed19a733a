package dashboard_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/internal/testing/localcluster"
	"github.com/raftps/raftps/raftstore/client"
	"github.com/raftps/raftps/security"
)

// chromium returns the path of Debian's chromium, installing it with
// scripts/install-chromium.sh when it is missing. The test fails (it does
// not skip) when it cannot be installed.
func chromium(t *testing.T, root string) string {
	t.Helper()
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	out, err := exec.Command(filepath.Join(root, "scripts", "install-chromium.sh")).CombinedOutput()
	if err != nil {
		t.Fatalf("chromium is missing and scripts/install-chromium.sh failed: %v\n%s", err, out)
	}
	p, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium is still missing after scripts/install-chromium.sh: %v", err)
	}
	return p
}

// buildRaftps builds the raftps binary into dir.
func buildRaftps(t *testing.T, root, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "raftps")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/raftps")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/raftps: %v\n%s", err, out)
	}
	return bin
}

// resultsDir is where the browser test leaves its screenshots and figures
// (dashboard/results, gitignored).
func resultsDir(t *testing.T, root string) string {
	dir := filepath.Join(root, "dashboard", "results")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// The job of the browser test: small enough for CI (a few tens of
// seconds on 2 loaded cores), long enough to kill a node midway; three
// pserver slots so that the killed node certainly held one.
const (
	browserJob      = "dash-e2e"
	browserPasses   = 3
	browserRecords  = 12000
	browserPerTask  = 300
	browserPservers = 3
)

// page evaluates JavaScript in a tab.
type page struct {
	t   *testing.T
	ctx context.Context
}

func (p page) eval(expr string, out any) error {
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string]("JSON.stringify("+expr+")"))
	if err != nil {
		return err
	}
	return json.Unmarshal([]byte(s), out)
}

// waitFor polls expr (a boolean expression) every interval until it is
// true or timeout passes.
func (p page) waitFor(what, expr string, interval, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var ok bool
		err := p.eval(expr, &ok)
		if err == nil && ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not true after %v (last error %v): %s", what, timeout, err, expr)
		}
		time.Sleep(interval)
	}
}

func (p page) screenshot(path string) {
	ctx, cancel := context.WithTimeout(p.ctx, 20*time.Second)
	defer cancel()
	buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		p.t.Errorf("screenshot %s: %v", path, err)
		return
	}
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		p.t.Error(err)
	}
	p.t.Logf("screenshot %s (%d bytes)", path, len(buf))
}

// jsErrors records uncaught exceptions of a tab.
type jsErrors struct {
	mu   sync.Mutex
	msgs []string
}

// listen is a chromedp listener (WithListener) of a tab's events.
func (j *jsErrors) listen(ev any) {
	if e, ok := ev.(*runtime.EventExceptionThrown); ok {
		j.mu.Lock()
		d := e.ExceptionDetails
		msg := fmt.Sprintf("%s at %s:%d:%d", d.Text, d.URL, d.LineNumber+1, d.ColumnNumber+1)
		if d.Exception != nil {
			msg += ": " + d.Exception.Description
		}
		j.msgs = append(j.msgs, msg)
		j.mu.Unlock()
	}
}

func (j *jsErrors) get() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.msgs)
}

// arrivalLog records when a gRPC watcher received each event of a job.
type arrivalLog struct {
	mu     sync.Mutex
	at     map[int64]time.Time
	minLag time.Duration // smallest arrival - event time (cluster time's lag)
}

func (a *arrivalLog) get() map[int64]time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return maps.Clone(a.at)
}

func (a *arrivalLog) lag() time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.minLag
}

// watchArrivals follows the job's events over gRPC from seq 1, re-opening
// the stream after a failure, until the job ends or ctx does.
func watchArrivals(ctx context.Context, cl *client.Client, job string) *arrivalLog {
	a := &arrivalLog{at: map[int64]time.Time{}, minLag: time.Duration(math.MaxInt64)}
	go func() {
		next := int64(1)
		for ctx.Err() == nil {
			stream, err := cl.Master.WatchJob(ctx, &pb.WatchJobRequest{Name: job, FromSeq: next})
			for err == nil {
				var ev *pb.JobEvent
				if ev, err = stream.Recv(); err != nil {
					break
				}
				now := time.Now()
				a.mu.Lock()
				a.at[ev.Seq] = now
				if l := now.Sub(time.Unix(0, ev.UnixNano)); l < a.minLag {
					a.minLag = l
				}
				a.mu.Unlock()
				next = ev.Seq + 1
				if ev.Type == pb.JobEvent_JOB_ENDED {
					return
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return a
}

// stallReport says where a page that stopped showing progress stopped:
// what the page received and charted, what a gRPC watcher received, and
// the job as the master reports it (a page whose stream stalled, or a job
// that did).
func stallReport(ctx context.Context, p page, cl *client.Client, a *arrivalLog, job string) string {
	var seen struct {
		Events, Done, Charted, LastSeq int
		Frame                          bool
	}
	err := p.eval(`(() => { const e = raftps.events || []; return {Events: e.length,
		Done: e.filter(x => x.type === "task_done").length,
		Charted: raftps.charts.loss ? raftps.charts.loss.data[0].length : -1,
		LastSeq: e.length ? e[e.length - 1].seq : 0, Frame: !!(raftps.job && raftps.job.frame)}; })()`, &seen)
	var b strings.Builder
	fmt.Fprintf(&b, "page: %d events (last seq %d), %d task_done, %d charted, a render pending %v (eval error %v)\n",
		seen.Events, seen.LastSeq, seen.Done, seen.Charted, seen.Frame, err)
	arrived := a.get()
	var last int64
	for seq := range arrived {
		last = max(last, seq)
	}
	fmt.Fprintf(&b, "gRPC watcher: %d events, last seq %d\n", len(arrived), last)
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := cl.Master.GetJob(cctx, &pb.GetJobRequest{Name: job})
	if err != nil {
		fmt.Fprintf(&b, "master: GetJob: %v", err)
		return b.String()
	}
	st := resp.Status
	fmt.Fprintf(&b, "master: %v pass %d: todo %d pending %d done %d failed %d, events seq %d, %d trainers, message %q",
		st.State, st.Pass, st.Todo, st.Pending, st.Done, st.Failed, st.EventsSeq, len(st.Trainers), st.Message)
	for _, ps := range st.Pservers {
		fmt.Fprintf(&b, "\n  slot %d on %s (incarnation %d)", ps.Index, ps.Node, ps.Incarnation)
	}
	return b.String()
}

// nonLeader is the first node that is not leader.
func nonLeader(nodes []*localcluster.Node, leader string) *localcluster.Node {
	for _, n := range nodes {
		if n.ID != leader {
			return n
		}
	}
	return nil
}

func nodeByID(nodes []*localcluster.Node, id string) *localcluster.Node {
	for _, n := range nodes {
		if n.ID == id {
			return n
		}
	}
	return nil
}

// waitLeader waits for a leader other than not and returns its id.
func waitLeader(t *testing.T, ctx context.Context, cl *client.Client, not string) string {
	t.Helper()
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := cl.Cluster.Status(cctx, &pb.StatusRequest{})
		cancel()
		if err == nil && st.Leader != "" && st.Leader != not {
			return st.Leader
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no leader: %v", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// jobEvents reads every event of an ended job over gRPC (WatchJob from 1
// returns after JOB_ENDED).
func jobEvents(t *testing.T, ctx context.Context, cl *client.Client, job string) []*pb.JobEvent {
	t.Helper()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	stream, err := cl.Master.WatchJob(cctx, &pb.WatchJobRequest{Name: job, FromSeq: 1})
	if err != nil {
		t.Fatal(err)
	}
	var out []*pb.JobEvent
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("WatchJob: %v", err)
		}
		out = append(out, ev)
	}
}

// values is series i of uPlot data without its nulls.
func values(data [][]*float64, i int) []float64 {
	var out []float64
	if i >= len(data) {
		return out
	}
	for _, v := range data[i] {
		if v != nil {
			out = append(out, *v)
		}
	}
	return out
}

func floatsEqual(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Abs(a[i]-b[i]) > 1e-9*math.Max(1, math.Abs(b[i])) {
			return false
		}
	}
	return true
}

// checkChartsDrawn fails unless every chart of the job page has drawn
// series (coloured pixels inside its plot area: uPlot draws on a canvas),
// its legend shows a time rather than "--", the accuracy axis fits the
// accuracies, the model reads as a model and the per-trainer chart has a
// series per trainer (issue 37: the task-queue chart drew no lines, the
// accuracy axis was 0-100%, the model read "external []" and every legend
// "Time: --").
func checkChartsDrawn(t *testing.T, p page) {
	t.Helper()
	var charts map[string]struct {
		Colored int      `json:"colored"`
		Series  int      `json:"series"`
		Legend  string   `json:"legend"`
		YMin    *float64 `json:"ymin"`
		YMax    *float64 `json:"ymax"`
		Points  int      `json:"points"`
		Outside int      `json:"outside"`
	}
	// A pixel is a series' if it is saturated (max-min channel > 60): the
	// background, grid and axes are grey.
	if err := p.eval(`Object.fromEntries(Object.entries(raftps.charts).map(([k, u]) => {
		const b = u.bbox, d = u.ctx.getImageData(b.left, b.top, b.width, b.height).data;
		let colored = 0;
		for (let i = 0; i < d.length; i += 4) {
			if (d[i + 3] > 0 && Math.max(d[i], d[i + 1], d[i + 2]) - Math.min(d[i], d[i + 1], d[i + 2]) > 60) colored++;
		}
		const v = u.root.querySelector(".u-legend .u-series:first-child .u-value");
		const outside = u.data[0].filter((x, i) => (x < u.scales.x.min || x > u.scales.x.max) && u.data.slice(1).some((s) => s[i] !== null && s[i] !== undefined)).length;
		return [k, {colored, series: u.series.length - 1, legend: v ? v.textContent : "", ymin: u.scales.y.min, ymax: u.scales.y.max,
			points: u.data.slice(1).reduce((a, s) => a + s.filter((x) => x !== null && x !== undefined).length, 0), outside}];
	}))`, &charts); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"loss", "acc", "rate", "queue", "trainers", "timeline"} {
		c, ok := charts[name]
		switch {
		case !ok:
			t.Errorf("the job page has no %s chart", name)
		case c.Colored < 20:
			t.Errorf("the %s chart drew %d coloured pixels (%d points in %d series): no drawn series", name, c.Colored, c.Points, c.Series)
		case c.Outside > 0:
			t.Errorf("the %s chart leaves %d of its points outside its time axis (not drawn)", name, c.Outside)
		case c.Legend == "" || strings.Contains(c.Legend, "--"):
			t.Errorf("the %s chart's legend shows the time %q", name, c.Legend)
		default:
			t.Logf("%s chart: %d series, %d points, %d coloured pixels, legend %q", name, c.Series, c.Points, c.Colored, c.Legend)
		}
	}
	if a := charts["acc"]; a.YMin == nil || a.YMax == nil {
		t.Errorf("the accuracy chart has no y scale")
	} else if *a.YMax-*a.YMin > 0.5 {
		t.Errorf("the accuracy axis runs %.2f to %.2f, want it fitted to the accuracies", *a.YMin, *a.YMax)
	}
	var trainers []string
	if err := p.eval(`raftps.job.trainers || []`, &trainers); err != nil {
		t.Fatal(err)
	}
	if len(trainers) == 0 || charts["trainers"].Series != len(trainers) {
		t.Errorf("per-trainer chart: %d series for trainers %v", charts["trainers"].Series, trainers)
	}
	var cards string
	if err := p.eval(`document.querySelector("#job-cards").textContent`, &cards); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(cards, "mlp, hidden 32") || strings.Contains(cards, "[") {
		t.Errorf("the model card reads %q, want \"mlp, hidden 32\"", cards)
	}
}

// checkShownTimes fails if a job event that became readable (arrived:
// when the independent gRPC watcher received it) more than 3 s after a
// leaderless period ended (resumed; by then every entry proposed during
// it is applied) is shown on the page at a time more than 2 s from that
// wall-clock moment (the page's Events table, charts and timeline show
// e.time; the page itself may have replayed the event later). Job times
// were the replicated cluster clock, which skips every leaderless period.
// Events that arrived in the 5 s after the leader's kill are left out:
// an entry the killed leader proposed (and stamped) is committed by the
// next one, after the election, and shows when it was proposed.
func checkShownTimes(t *testing.T, p page, arrived map[int64]time.Time, resumed, killed time.Time) {
	t.Helper()
	var events []struct {
		Seq  int64   `json:"seq"`
		Type string  `json:"type"`
		Time float64 `json:"time"`
	}
	if err := p.eval(`raftps.events`, &events); err != nil {
		t.Fatal(err)
	}
	after := resumed.Add(3 * time.Second)
	checked, worst := 0, 0.0
	for _, e := range events {
		a, ok := arrived[e.Seq]
		if !ok || a.Before(after) || !a.Before(killed) && a.Before(killed.Add(5*time.Second)) {
			continue
		}
		at := float64(a.UnixMicro()) / 1000
		checked++
		off := math.Abs(at - e.Time)
		worst = max(worst, off)
		if off > 2000 {
			t.Errorf("event %d (%s) shown at %s, arrived at %s: %.1f s off the wall clock", e.Seq, e.Type,
				time.UnixMilli(int64(e.Time)).Format(time.StampMilli), time.UnixMilli(int64(at)).Format(time.StampMilli), off/1000)
		}
	}
	t.Logf("%d events arrived more than 3 s after the leaderless period (and not within 5 s after the kill); the farthest shown time was %.0f ms from its arrival", checked, worst)
	if checked < 10 {
		t.Errorf("only %d events arrived after the leaderless period", checked)
	}
}

// browserOptions are headless Chromium's options for a browser whose
// profile and home are under dir (made here), presenting files' client
// certificate.
func browserOptions(t *testing.T, chrome, dir string, files security.Files) []chromedp.ExecAllocatorOption {
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chrome),
		chromedp.Env("HOME=" + browserHome(t, dir, files)),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(filepath.Join(dir, "chromium-profile")),
		chromedp.WindowSize(1400, 1000),
	}
}

// startTLSCluster starts 3 nodes in clusterDir with mutual TLS everywhere,
// the HTTP port included (--http-tls: the browser presents the admin's
// certificate), and returns them, the admin's certificate files, the
// client endpoints and an admin client. The client is closed and the
// nodes stopped at the test's end; a failed test names the nodes' logs.
func startTLSCluster(t *testing.T, bin, clusterDir string) ([]*localcluster.Node, security.Files, []string, *client.Client) {
	t.Helper()
	nodes, err := localcluster.New(bin, clusterDir, 3, "--http-tls")
	if err != nil {
		t.Fatal(err)
	}
	admin := nodes[0].Admin
	adminTLS, err := security.Load(admin, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if err := n.Start(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			if n.Running() {
				_ = n.Stop(10 * time.Second)
			}
		}
		if t.Failed() {
			for _, n := range nodes {
				t.Logf("node log: %s", n.LogPath)
			}
		}
	})
	var eps []string
	for _, n := range nodes {
		eps = append(eps, n.GRPC)
	}
	cl, err := client.New(eps, adminTLS.DialOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return nodes, admin, eps, cl
}
