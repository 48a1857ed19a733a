package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/internal/testing/localcluster"
	"github.com/raftps/raftps/internal/testing/testutil"
	"github.com/raftps/raftps/security"
)

// TestBrowserDashboard opens the dashboard of a real 3-node cluster in
// headless Chromium while a job runs, SIGKILLs the Raft leader midway and
// restarts it, and checks what a person would look at: the loss and
// accuracy plots hold exactly the job's data points (compared with the
// job's events read over gRPC), the node's death, the leader change and
// the pserver restores after the kill are on the timeline, and the
// cluster page shows the new leader within 2 s of the kill. Everything
// runs over mutual TLS, the dashboard too (--http-tls): the browser trusts
// the cluster CA and presents the admin's certificate from its NSS
// database (browserHome, autoSelectClientCert), so the data on the page
// came over HTTPS with a client certificate. At the end a second browser
// with a reader's certificate sees the Jobs page without cancel or delete
// and is refused a delete (checkRolesInBrowser). It saves screenshots and
// the measured figures (page weight, event-to-page latency, leader-change
// time) under dashboard/results.
func TestBrowserDashboard(t *testing.T) {
	root, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	chrome := chromium(t, root)
	browserToolsReady(t, root)
	results := resultsDir(t, root)
	tmp := t.TempDir()
	bin := buildRaftps(t, root, tmp)

	// The nodes' data and logs go to results/cluster (replaced each run) so
	// that a failure can be read after the test.
	clusterDir := filepath.Join(results, "cluster")
	if err := os.RemoveAll(clusterDir); err != nil {
		t.Fatal(err)
	}
	// Mutual TLS everywhere, the HTTP port included (--http-tls): the
	// browser presents the admin's certificate.
	nodes, admin, eps, cl := startTLSCluster(t, bin, clusterDir)
	// New made the cluster's CA (and the admin's certificate) in
	// <clusterDir>/pki; the reader's certificate is issued there later.
	pkiDir := filepath.Join(clusterDir, "pki")
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	leader := waitLeader(t, ctx, cl, "")

	submit := exec.CommandContext(ctx, bin, "--endpoints", strings.Join(eps, ","), "--cacert", admin.CA, "--cert", admin.Cert, "--key", admin.Key,
		"job", "submit", "--name", browserJob,
		"--records", fmt.Sprint(browserRecords), "--records-per-task", fmt.Sprint(browserPerTask),
		"--passes", fmt.Sprint(browserPasses), "--pservers", fmt.Sprint(browserPservers), "--hidden", "32",
		"--checkpoint-steps", "20", "--replicas", "2", "--target-accuracy", "0",
		"--slot-replicas", "1") // restores after the kill, not promotions (TestBrowserReplicaView has those)
	submit.Dir = root
	if out, err := submit.CombinedOutput(); err != nil {
		t.Fatalf("job submit: %v\n%s", err, out)
	}

	// An independent watcher of the job's events over gRPC: when each
	// event became readable (the reference of the event-to-page latency).
	arrivals := watchArrivals(ctx, cl, browserJob)

	// The pages are opened on a node that is not the leader now; if the
	// leader has moved to it by the time of the kill, they move to a
	// survivor first (the job page replays the job's events from seq 1).
	server := nonLeader(nodes, leader)
	base := func(n *localcluster.Node) string { return "https://" + n.HTTP + "/" }
	t.Logf("leader %s; dashboard of %s at %s", leader, server.ID, base(server))

	// The browser trusts the cluster CA and presents the admin's
	// certificate from its NSS database, picked by a managed policy.
	autoSelectClientCert(t, admin.CA)
	browserOpts := func(name string, files security.Files) []chromedp.ExecAllocatorOption {
		return browserOptions(t, chrome, filepath.Join(tmp, name), files)
	}
	opts := browserOpts("browser-admin", admin)
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	defer acancel()
	var jobErrs, clusterErrs jsErrors
	jobCtx, jcancel := chromedp.NewContext(actx, chromedp.WithListener(jobErrs.listen))
	defer jcancel()
	start := time.Now()
	if err := chromedp.Do(jobCtx, chromedp.Navigate(base(server)+"#/jobs/"+browserJob), chromedp.WaitVisible("#ch-loss .uplot")); err != nil {
		t.Fatalf("open the job page: %v", err)
	}
	t.Logf("job page loaded in %v", time.Since(start).Round(time.Millisecond))
	jobPage := page{t: t, ctx: jobCtx}
	clusterCtx, ccancel := chromedp.NewContext(jobCtx, chromedp.WithListener(clusterErrs.listen)) // a second tab of the same browser
	defer ccancel()
	if err := chromedp.Do(clusterCtx, chromedp.Navigate(base(server)+"#/cluster"), chromedp.WaitVisible("#leader")); err != nil {
		t.Fatalf("open the cluster page: %v", err)
	}
	clusterPage := page{t: t, ctx: clusterCtx}

	// A leaderless period early in the job: the leader's two followers
	// stopped (SIGSTOP) for 10 s, so the cluster has no quorum and the
	// leader steps down; the next one has a new term, whose first entry
	// re-bases the cluster clock (were the leader stopped instead, it
	// could lead on in its term after SIGCONT: with pre-vote the lone
	// node never starts an election). Times shown afterwards must still
	// be the wall clock's. The pages' node may be one of those stopped:
	// its streams stall and go on.
	if err := jobPage.waitFor("five tasks on the loss plot", `raftps.charts.loss && raftps.charts.loss.data[0].length >= 5`,
		200*time.Millisecond, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	var paused []*localcluster.Node
	pauseLeader := waitLeader(t, ctx, cl, "")
	for _, n := range nodes {
		if n.ID != pauseLeader {
			n.Signal(syscall.SIGSTOP)
			paused = append(paused, n)
		}
	}
	t.Logf("SIGSTOP %s and %s for 10 s (no quorum)", paused[0].ID, paused[1].ID)
	time.Sleep(10 * time.Second)
	for _, n := range paused {
		n.Signal(syscall.SIGCONT)
	}
	resumed := time.Now()

	// Midway: a third of the tasks done, as the page counts them.
	total := browserRecords / browserPerTask * browserPasses
	if err := jobPage.waitFor("a third of the tasks on the loss plot",
		fmt.Sprintf(`raftps.charts.loss && raftps.charts.loss.data[0].length >= %d`, total/3), 200*time.Millisecond, 3*time.Minute); err != nil {
		t.Fatalf("%v\n%s", err, stallReport(ctx, jobPage, cl, arrivals, browserJob))
	}
	// The victim is the leader the cluster page shows, confirmed over gRPC.
	var victim *localcluster.Node
	deadline := time.Now().Add(30 * time.Second)
	for victim == nil {
		var shown string
		_ = clusterPage.eval(`document.querySelector("#leader").dataset.leader`, &shown)
		if l := waitLeader(t, ctx, cl, ""); l == shown {
			victim = nodeByID(nodes, l)
		} else if time.Now().After(deadline) {
			t.Fatalf("the cluster page shows leader %q, the cluster says %q", shown, l)
		} else {
			time.Sleep(50 * time.Millisecond)
		}
	}
	if victim == server {
		server = nonLeader(nodes, victim.ID)
		t.Logf("the leader moved to %s, which serves the pages: moving them to %s", victim.ID, server.ID)
		if err := chromedp.Do(jobCtx, chromedp.Navigate(base(server)+"#/jobs/"+browserJob), chromedp.WaitVisible("#ch-loss .uplot")); err != nil {
			t.Fatal(err)
		}
		if err := chromedp.Do(clusterCtx, chromedp.Navigate(base(server)+"#/cluster"), chromedp.WaitVisible("#leader")); err != nil {
			t.Fatal(err)
		}
		if err := clusterPage.waitFor("cluster page shows the leader", fmt.Sprintf(`document.querySelector("#leader").dataset.leader === %q`, victim.ID),
			50*time.Millisecond, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	clusterPage.screenshot(filepath.Join(results, "cluster-before.png"))
	jobPage.screenshot(filepath.Join(results, "job-before-kill.png"))
	lagBefore := arrivals.lag()
	victim.Kill()
	killed := time.Now()
	t.Logf("SIGKILL %s (the leader) at %s", victim.ID, killed.Format(time.TimeOnly))

	// The cluster page polls; it must name a new leader within 2 s.
	err = clusterPage.waitFor("cluster page shows a new leader",
		fmt.Sprintf(`(l => l !== "" && l !== %q)(document.querySelector("#leader").dataset.leader)`, victim.ID), 20*time.Millisecond, 10*time.Second)
	leaderShown := time.Since(killed)
	if err != nil {
		t.Fatal(err)
	}
	var newLeader string
	if err := clusterPage.eval(`document.querySelector("#leader").dataset.leader`, &newLeader); err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster page shows the new leader %s %v after the kill", newLeader, leaderShown.Round(time.Millisecond))
	if leaderShown > 2*time.Second {
		t.Errorf("the cluster page showed the new leader %v after the kill, want <= 2s", leaderShown)
	}
	// The screenshot once the polled snapshot has the new leader's own
	// view (the card changed at the pushed event, before the next poll).
	if err := clusterPage.waitFor("the new leader's own view on the cluster page",
		fmt.Sprintf(`raftps.cluster.members.some(m => m.id === %q && m.raft && m.raft.state === "Leader")`, newLeader), 50*time.Millisecond, 10*time.Second); err != nil {
		t.Error(err)
	}
	clusterPage.screenshot(filepath.Join(results, "cluster-after-kill.png"))

	// The job page's timeline shows the death (gossip's suspect or dead)
	// before the node comes back.
	if err := jobPage.waitFor("the killed node's death on the job page",
		fmt.Sprintf(`raftps.clusterEvents.some(e => e.kind === "member" && e.node === %q && e.status !== "alive")`, victim.ID),
		100*time.Millisecond, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	t.Logf("restarted %s %v after the kill", victim.ID, restarted.Sub(killed).Round(time.Millisecond))

	if err := jobPage.waitFor("the job ends on the page",
		`raftps.job.status && ["succeeded", "failed", "cancelled"].includes(raftps.job.status.state) && raftps.events.some(e => e.type === "job_ended")`,
		250*time.Millisecond, 4*time.Minute); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // one more status tick and frame
	jobPage.screenshot(filepath.Join(results, "job-after.png"))
	if err := clusterPage.waitFor("the restarted node answers on the cluster page",
		fmt.Sprintf(`raftps.cluster.members.some(m => m.id === %q && m.status === "alive" && m.raft)`, victim.ID), 100*time.Millisecond, 30*time.Second); err != nil {
		t.Error(err)
	}
	clusterPage.screenshot(filepath.Join(results, "cluster-after-restart.png"))
	checkShownTimes(t, jobPage, arrivals.get(), resumed, killed)
	checkChartsDrawn(t, jobPage)

	// The truth, read over gRPC.
	evs := jobEvents(t, ctx, cl, browserJob)
	st, err := cl.Master.GetJob(ctx, &pb.GetJobRequest{Name: browserJob})
	if err != nil {
		t.Fatal(err)
	}
	if st.Status.State != pb.JobState_JOB_SUCCEEDED {
		t.Errorf("job state %v (%s), want succeeded", st.Status.State, st.Status.Message)
	}
	var wantLoss, wantAcc []float64
	// Events after the kill are those the independent watcher received
	// after it (an event's time is its proposal's, which can precede the
	// kill for an entry committed after it).
	arrived := arrivals.get()
	var restoresAfterKill []*pb.JobEvent
	restoresAll := 0
	for _, ev := range evs {
		switch ev.Type {
		case pb.JobEvent_TASK_DONE:
			if ev.Loss != 0 {
				wantLoss = append(wantLoss, ev.Loss)
			}
		case pb.JobEvent_EVAL_REPORTED:
			wantAcc = append(wantAcc, ev.Accuracy)
		case pb.JobEvent_PSERVER_RESTORED:
			restoresAll++
			if at, ok := arrived[ev.Seq]; ok && !at.Before(killed) {
				restoresAfterKill = append(restoresAfterKill, ev)
			}
		}
	}
	var passAcc []float64
	for _, m := range st.Status.Metrics {
		passAcc = append(passAcc, m.TestAccuracy)
	}

	var shown struct {
		Loss     [][]*float64 `json:"loss"`
		Acc      [][]*float64 `json:"acc"`
		Timeline [][]*float64 `json:"timeline"`
		AccText  string       `json:"accText"`
		Cluster  []struct {
			Time   int64  `json:"time"`
			Kind   string `json:"kind"`
			Node   string `json:"node"`
			Status string `json:"status"`
		} `json:"cluster"`
	}
	if err := jobPage.eval(`({loss: raftps.charts.loss.data, acc: raftps.charts.acc.data, timeline: raftps.charts.timeline.data,
		accText: document.querySelector("#job-acc").textContent, cluster: raftps.clusterEvents})`, &shown); err != nil {
		t.Fatal(err)
	}
	if got := values(shown.Loss, 1); !floatsEqual(got, wantLoss) {
		t.Errorf("loss plot: %d points, the job's TASK_DONE events carry %d losses (or the values differ)", len(got), len(wantLoss))
	} else {
		t.Logf("loss plot holds all %d task losses of the job", len(got))
	}
	if len(wantLoss) < total {
		t.Errorf("%d TASK_DONE losses for %d tasks", len(wantLoss), total)
	}
	if got := values(shown.Acc, 1); !floatsEqual(got, wantAcc) || !floatsEqual(got, passAcc) || len(got) != browserPasses {
		t.Errorf("accuracy plot %v; EVAL_REPORTED %v; pass metrics %v; want one point per pass (%d)", got, wantAcc, passAcc, browserPasses)
	} else {
		t.Logf("accuracy plot holds the %d pass accuracies %v", len(got), got)
	}
	if want := fmt.Sprintf("%.2f%%", 100*passAcc[len(passAcc)-1]); shown.AccText != want {
		t.Errorf("accuracy card %q, want %q", shown.AccText, want)
	}
	// Timeline series: 1 node, 2 leader, 3 requeue, 4 restore, 5 rollback, 6 checkpoint.
	count := func(series ...int) int {
		k := 0
		for _, sr := range series {
			for _, v := range shown.Timeline[sr] {
				if v != nil {
					k++
				}
			}
		}
		return k
	}
	// at reports whether a series of the timeline has a point at x (s).
	at := func(x float64, series ...int) bool {
		for _, sr := range series {
			for i, v := range shown.Timeline[sr] {
				if v != nil && shown.Timeline[0][i] != nil && math.Abs(*shown.Timeline[0][i]-x) < 0.0015 {
					return true
				}
			}
		}
		return false
	}
	var deaths, leaderChanges int // seen by the page's node after the kill
	for _, e := range shown.Cluster {
		if e.Time < killed.UnixMilli() {
			continue
		}
		switch {
		case e.Kind == "member" && e.Node == victim.ID && e.Status != "alive":
			deaths++
		case e.Kind == "leader":
			leaderChanges++
		}
	}
	restorePts := count(4, 5)
	t.Logf("timeline: %d node and %d leader points (after the kill the page's node saw %s die %d times and %d leader changes); "+
		"%d restore/rollback points for the job's %d PSERVER_RESTORED events, %d of them after the kill",
		count(1), count(2), victim.ID, deaths, leaderChanges, restorePts, restoresAll, len(restoresAfterKill))
	if deaths < 1 || count(1) < deaths {
		t.Errorf("the killed node's death: %d events after the kill, %d node points on the timeline", deaths, count(1))
	}
	if leaderChanges < 1 || count(2) < leaderChanges {
		t.Errorf("leader changes: %d after the kill, %d leader points on the timeline", leaderChanges, count(2))
	}
	if len(restoresAfterKill) < 1 {
		t.Errorf("the job has no PSERVER_RESTORED event after the kill of a node holding a slot")
	}
	if restorePts != restoresAll {
		t.Errorf("timeline holds %d restore/rollback points, the job has %d PSERVER_RESTORED events", restorePts, restoresAll)
	}
	for _, ev := range restoresAfterKill {
		if !at(float64(ev.UnixNano/int64(time.Millisecond))/1000, 4, 5) {
			t.Errorf("restore after the kill (seq %d, %s) is not on the timeline at its time", ev.Seq, ev.Message)
		}
	}

	// Figures: page weight, external requests, event-to-page latency.
	var perf struct {
		Origin    string `json:"origin"`
		Resources []struct {
			Name     string  `json:"name"`
			Transfer float64 `json:"transfer"`
			Body     float64 `json:"body"`
		} `json:"resources"`
		Rendered map[string]float64 `json:"rendered"` // seq -> Date.now() when drawn
		Arrived  map[string]float64 `json:"arrived"`  // seq -> Date.now() when the SSE message came
	}
	if err := jobPage.eval(`({origin: location.origin,
		resources: performance.getEntriesByType("navigation").concat(performance.getEntriesByType("resource")).map(e => ({name: e.name, transfer: e.transferSize, body: e.decodedBodySize})),
		rendered: raftps.rendered, arrived: raftps.arrived})`, &perf); err != nil {
		t.Fatal(err)
	}
	var static, staticWire float64
	for _, r := range perf.Resources {
		if !strings.HasPrefix(r.Name, perf.Origin+"/") {
			t.Errorf("the page fetched %s, outside its origin %s", r.Name, perf.Origin)
		}
		if !strings.Contains(r.Name, "/api/") {
			static += r.Body
			staticWire += r.Transfer
		}
	}
	// Latency of events that happened while the page was open: from the
	// moment the independent gRPC watcher received an event to the moment
	// the page drew it (both on this machine's clock).
	var lat, sseLat []float64
	for seq, at := range arrivals.get() {
		key := fmt.Sprint(seq)
		if at.Before(start) {
			continue
		}
		if r, ok := perf.Rendered[key]; ok {
			lat = append(lat, r-float64(at.UnixMicro())/1000)
		}
		if a, ok := perf.Arrived[key]; ok {
			sseLat = append(sseLat, a-float64(at.UnixMicro())/1000)
		}
	}
	slices.Sort(lat)
	slices.Sort(sseLat)
	if len(lat) < 10 {
		t.Errorf("only %d live events measured for latency", len(lat))
	}
	q := func(p float64) float64 {
		if len(lat) == 0 {
			return math.NaN()
		}
		return lat[min(len(lat)-1, int(p*float64(len(lat))))]
	}
	t.Logf("page weight: %d requests before the API, %.0f bytes decoded (%.0f on the wire)", len(perf.Resources), static, staticWire)
	t.Logf("event-to-page latency (gRPC watcher -> drawn) over %d live events: p50 %.1f ms, p95 %.1f ms, max %.1f ms", len(lat), q(0.5), q(0.95), q(1))
	sseQ := func(p float64) float64 {
		if len(sseLat) == 0 {
			return math.NaN()
		}
		return sseLat[min(len(sseLat)-1, int(p*float64(len(sseLat))))]
	}
	t.Logf("of which to the SSE message: p50 %.1f ms, p95 %.1f ms", sseQ(0.5), sseQ(0.95))
	if q(0.5) > 1000 {
		t.Errorf("median event-to-page latency %.0f ms, want under 1 s", q(0.5))
	}
	for _, e := range append(jobErrs.get(), clusterErrs.get()...) {
		t.Errorf("JavaScript exception: %s", e)
	}
	fig := map[string]any{
		"leader_shown_after_kill_ms": leaderShown.Milliseconds(), "new_leader": newLeader, "killed": victim.ID,
		"page_bytes_decoded": static, "page_bytes_wire": staticWire, "requests": perf.Resources,
		"latency_ms":     map[string]float64{"n": float64(len(lat)), "p50": q(0.5), "p95": q(0.95), "max": q(1)},
		"sse_latency_ms": map[string]float64{"p50": sseQ(0.5), "p95": sseQ(0.95)},
		"cluster_lag_ms": lagBefore.Milliseconds(),
		"loss_points":    len(values(shown.Loss, 1)), "accuracy_points": values(shown.Acc, 1),
		"timeline": map[string]int{"node_points": count(1), "leader_points": count(2), "deaths_after_kill": deaths,
			"leader_changes_after_kill": leaderChanges, "restore_points": restorePts, "restores_after_kill": len(restoresAfterKill)},
	}
	b, _ := json.MarshalIndent(fig, "", "  ")
	if err := os.WriteFile(filepath.Join(results, "browser.json"), b, 0o644); err != nil {
		t.Error(err)
	}

	checkRolesInBrowser(t, ctx, cl, browserOpts, jobPage, base(server), pkiDir, results)
}
