package dashboard_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/internal/testing/testutil"
)

// shownReplica is one row of the job page's replicas table.
type shownReplica struct {
	Slot      int32  `json:"slot"`
	Primary   string `json:"primary"`
	Backups   string `json:"backups"`
	Epoch     int64  `json:"epoch,string"`
	Lag       string `json:"lag"`
	Promotion string `json:"promotion"`
}

// readReplicas reads the replicas table and note of the job page.
const readReplicas = `({note: document.querySelector("#replicas-note").textContent,
	rows: [...document.querySelectorAll("#replicas tr[data-slot]")].map(tr => ({slot: +tr.dataset.slot,
		primary: tr.querySelector(".primary").textContent, backups: tr.querySelector(".backups").textContent,
		epoch: tr.querySelector(".epoch").textContent, lag: tr.querySelector(".lag").textContent,
		promotion: tr.querySelector(".promotion").textContent}))})`

// TestBrowserReplicaView (issue 34) opens the job page of a real 3-node
// cluster (mutual TLS, the HTTP port too) in headless Chromium while a job
// that left replicas unset runs: the master chose 2 ("default: capacity
// for 2" on the page), and every slot's row shows the primary, in-sync
// backups and epoch that GetJob says, and a replication lag read from the
// primary's /metrics over mutual TLS (a number, not "?"). Then the node
// of a slot's primary (not the leader when another primary is) is
// SIGKILLed: the row shows the promoted backup as primary, a higher
// epoch, and the promotion with how long it took, as the job's
// PSERVER_PROMOTED event says.
func TestBrowserReplicaView(t *testing.T) {
	root, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	chrome := chromium(t, root)
	browserToolsReady(t, root)
	results := resultsDir(t, root)
	tmp := t.TempDir()
	bin := buildRaftps(t, root, tmp)
	clusterDir := filepath.Join(results, "replicas-cluster")
	if err := os.RemoveAll(clusterDir); err != nil {
		t.Fatal(err)
	}
	nodes, admin, eps, cl := startTLSCluster(t, bin, clusterDir)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	leader := waitLeader(t, ctx, cl, "")

	const job = "dash-replicas"
	submit := exec.CommandContext(ctx, bin, "--endpoints", strings.Join(eps, ","), "--cacert", admin.CA, "--cert", admin.Cert, "--key", admin.Key,
		"job", "submit", "--name", job, "--records", "60000", "--records-per-task", "300", "--passes", "3",
		"--pservers", "2", "--hidden", "32", "--checkpoint-steps", "1000", "--target-accuracy", "0")
	submit.Dir = root
	if out, err := submit.CombinedOutput(); err != nil {
		t.Fatalf("job submit: %v\n%s", err, out)
	}

	autoSelectClientCert(t, admin.CA)
	actx, acancel := chromedp.NewExecAllocator(ctx, browserOptions(t, chrome, filepath.Join(tmp, "browser"), admin)...)
	defer acancel()
	var errs jsErrors
	pctx, pcancel := chromedp.NewContext(actx, chromedp.WithListener(errs.listen))
	defer pcancel()
	server := nonLeader(nodes, leader)
	if err := chromedp.Do(pctx, chromedp.Navigate("https://"+server.HTTP+"/#/jobs/"+job), chromedp.WaitVisible("#replicas")); err != nil {
		t.Fatalf("open the job page: %v", err)
	}
	p := page{t: t, ctx: pctx}

	// Both slots replicated, each row's lag a number.
	if err := p.waitFor("both slots' replicas with their lag", `(r => r.length === 2 && r.every(x => x.backups.length > 0 && x.lag.textContent !== "?"))
		([...document.querySelectorAll("#replicas tr[data-slot]")].map(tr => ({backups: tr.querySelector(".backups").textContent, lag: tr.querySelector(".lag")})))`,
		200*time.Millisecond, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	type shown struct {
		Note string         `json:"note"`
		Rows []shownReplica `json:"rows"`
	}
	var before shown
	if err := p.eval(readReplicas, &before); err != nil {
		t.Fatal(err)
	}
	p.screenshot(filepath.Join(results, "replicas-before-kill.png"))
	t.Logf("page: %q %+v", before.Note, before.Rows)
	if before.Note != "2 per pserver slot (default: capacity for 2)" {
		t.Errorf("replicas note %q, want the master's default of 2 with its reason", before.Note)
	}
	st, err := cl.Master.GetJob(ctx, &pb.GetJobRequest{Name: job})
	if err != nil {
		t.Fatal(err)
	}
	truth := map[int32]*pb.PServerSlot{}
	for _, s := range st.Status.Pservers {
		truth[s.Index] = s
	}
	for _, r := range before.Rows {
		s := truth[r.Slot]
		if s == nil || s.ReplicaEpoch <= 0 {
			t.Fatalf("page shows slot %d replicated, GetJob %v", r.Slot, s)
		}
		// A slot's configuration changes only by a promotion or a drop,
		// none of which happens before the kill.
		if r.Primary != s.Node || r.Backups != strings.Join(s.Backups, ", ") || r.Epoch != s.ReplicaEpoch {
			t.Errorf("slot %d on the page: primary %s, backups %q, epoch %d; GetJob: %s, %v, %d", r.Slot, r.Primary, r.Backups, r.Epoch, s.Node, s.Backups, s.ReplicaEpoch)
		}
		if r.Lag != "0" && strings.Trim(r.Lag, "0123456789") != "" {
			t.Errorf("slot %d lag %q, want a count of updates", r.Slot, r.Lag)
		}
		if r.Promotion != "none" {
			t.Errorf("slot %d shows a promotion %q before any kill", r.Slot, r.Promotion)
		}
	}

	// The victim: a slot's primary, not the leader when another one is.
	victimRow := before.Rows[0]
	for _, r := range before.Rows {
		if r.Primary != leader {
			victimRow = r
			break
		}
	}
	victim := nodeByID(nodes, victimRow.Primary)
	if victim == server {
		server = nonLeader(nodes, victim.ID)
		if server == victim {
			server = nodeByID(nodes, leader)
		}
		if err := chromedp.Do(pctx, chromedp.Navigate("https://"+server.HTTP+"/#/jobs/"+job), chromedp.WaitVisible("#replicas")); err != nil {
			t.Fatal(err)
		}
	}
	victim.Kill()
	killed := time.Now()
	t.Logf("SIGKILL %s (primary of slot %d; leader %s)", victim.ID, victimRow.Slot, leader)
	if err := p.waitFor("the promotion on the page", fmt.Sprintf(`(tr => tr && tr.querySelector(".primary").textContent !== %q && /took /.test(tr.querySelector(".promotion").textContent))
		(document.querySelector('#replicas tr[data-slot="%d"]'))`, victim.ID, victimRow.Slot), 100*time.Millisecond, 90*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("page shows the promotion %v after the kill", time.Since(killed).Round(time.Millisecond))
	var after shown
	if err := p.eval(readReplicas, &after); err != nil {
		t.Fatal(err)
	}
	p.screenshot(filepath.Join(results, "replicas-after-kill.png"))
	i := slices.IndexFunc(after.Rows, func(r shownReplica) bool { return r.Slot == victimRow.Slot })
	row := after.Rows[i]
	if !strings.Contains(victimRow.Backups, row.Primary) || row.Epoch <= victimRow.Epoch {
		t.Errorf("slot %d after the kill: primary %s (backups were %q), epoch %d (was %d); want a backup promoted at a higher epoch",
			row.Slot, row.Primary, victimRow.Backups, row.Epoch, victimRow.Epoch)
	}
	// The promotion cell is the job's PSERVER_PROMOTED event for the slot.
	var promoted []string
	if err := p.eval(fmt.Sprintf(`raftps.events.filter(e => e.type === "pserver_promoted" && e.message.startsWith("slot %d on ")).map(e => e.message)`, row.Slot), &promoted); err != nil {
		t.Fatal(err)
	}
	if len(promoted) == 0 {
		t.Fatalf("no pserver_promoted event of slot %d on the page", row.Slot)
	}
	last := promoted[len(promoted)-1]
	took := last[strings.LastIndex(last, " in ")+4 : strings.LastIndex(last, " (")]
	if !strings.Contains(row.Promotion, "to "+row.Primary+", took "+took) {
		t.Errorf("promotion cell %q; the event says %q (want its node %s and duration %s)", row.Promotion, last, row.Primary, took)
	}
	if e := errs.get(); len(e) > 0 {
		t.Errorf("uncaught exceptions on the page: %v", e)
	}
}
