package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/schema"
)

// ackedPut is a put the cluster acknowledged, with its revision.
type ackedPut struct {
	key, value string
	rev        int64
}

// putLoad writes /load/<i> through every running node until stop is
// closed or max puts, and returns the acknowledged ones.
func putLoad(t *testing.T, c *Cluster, prefix string, max int, stop <-chan struct{}) []ackedPut {
	cl := c.Client()
	var acked []ackedPut
	for i := 0; i < max; i++ {
		select {
		case <-stop:
			return acked
		default:
		}
		k, v := fmt.Sprintf("%s%05d", prefix, i), fmt.Sprintf("v%d", i)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := cl.KV.Put(ctx, &pb.PutRequest{Key: []byte(k), Value: []byte(v)})
		cancel()
		if err == nil {
			acked = append(acked, ackedPut{k, v, resp.Header.Revision})
		}
	}
	return acked
}

// rangePrefix returns every key under prefix through p (linearizable).
func rangePrefix(t *testing.T, c *Cluster, p *Proc, prefix string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var resp *pb.RangeResponse
	var err error
	for ctx.Err() == nil {
		resp, err = c.Client(p).KV.Range(ctx, &pb.RangeRequest{Key: []byte(prefix), RangeEnd: schema.PrefixEnd([]byte(prefix))})
		if err == nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("range %s via %s: %v", prefix, p.ID, err)
	}
	out := map[string]string{}
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = string(kv.Value)
	}
	return out
}

func softmaxJob(t *testing.T, c *Cluster, p *Proc, name string, records, perTask, passes int) {
	t.Helper()
	mustCLI(t, c, p, "job", "submit", "--name", name, "--model", "mlp", "--hidden", "16", "--dataset", datasetDir(t),
		"--records", fmt.Sprint(records), "--records-per-task", fmt.Sprint(perTask), "--passes", fmt.Sprint(passes),
		"--pservers", "1", "--lr", "0.1", "--checkpoint-steps", "5", "--keep-max", "3")
}

// TestSnapshotSaveRestore: `raftps snapshot save` under write load and a
// running job; the file restored into a new 3-node cluster holds every
// put acknowledged at or below the snapshot's revision, and the job; a
// corrupted copy of the file is refused with a clear error.
func TestSnapshotSaveRestore(t *testing.T) {
	c := NewCluster(t, binPath, 3)
	c.StartAll()
	l := mustLeader(t, c, 20*time.Second)
	const job = "snap-job"
	softmaxJob(t, c, l, job, 6000, 1000, 1)

	stop := make(chan struct{})
	var acked []ackedPut
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); acked = putLoad(t, c, "/load/", 3000, stop) }()
	time.Sleep(700 * time.Millisecond)
	file := c.Dir + "/backup.snap"
	var saved struct {
		Revision int64  `json:"revision"`
		Index    uint64 `json:"index"`
		Keys     int    `json:"keys"`
		Jobs     int    `json:"jobs"`
		SHA256   string `json:"sha256"`
	}
	start := time.Now()
	out := mustCLI(t, c, c.Procs[1], "snapshot", "save", file, "-w", "json")
	took := time.Since(start)
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	if err := json.Unmarshal([]byte(out), &saved); err != nil {
		t.Fatalf("snapshot save -w json: %v\n%s", err, out)
	}
	want := map[string]string{}
	after := 0
	for _, p := range acked {
		if p.rev <= saved.Revision {
			want[p.key] = p.value
		} else {
			after++
		}
	}
	fi, _ := os.Stat(file)
	t.Logf("snapshot saved under load in %v: revision %d, index %d, %d keys, %d jobs, %d bytes; %d acked puts at or below it, %d after",
		took.Round(time.Millisecond), saved.Revision, saved.Index, saved.Keys, saved.Jobs, fi.Size(), len(want), after)
	if len(want) == 0 || after == 0 || saved.Jobs != 1 {
		t.Fatalf("the snapshot was not taken under load with the job: %d puts before, %d after, %d jobs", len(want), after, saved.Jobs)
	}

	// A corrupted copy is refused by the real binary, with a clear error.
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/3] ^= 0x40
	bad := c.Dir + "/corrupt.snap"
	if err := os.WriteFile(bad, b, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, errOut, err := c.CLI(ctx, c.Procs[0], "snapshot", "restore", bad, "--data-dir", c.Dir+"/never", "--id", "x")
	if err == nil || !strings.Contains(errOut, "not a valid raftps snapshot file") || !strings.Contains(errOut, "SHA-256 mismatch") {
		t.Fatalf("restore of a corrupted file: %v, stderr %q", err, errOut)
	}
	if _, err := os.Stat(c.Dir + "/never"); !os.IsNotExist(err) {
		t.Fatalf("a refused restore created its data dir: %v", err)
	}
	t.Logf("corrupted snapshot refused: %s", strings.TrimSpace(errOut))

	// The old cluster goes away; a new one is seeded from the file.
	c.KillAll()
	r := NewCluster(t, binPath, 3)
	var initial []string
	for _, p := range r.Procs {
		initial = append(initial, p.ID+"="+p.Raft)
	}
	for _, p := range r.Procs {
		mustCLI(t, r, p, "snapshot", "restore", file, "--data-dir", p.DataDir, "--id", p.ID, "--initial-cluster", strings.Join(initial, ","))
	}
	start = time.Now()
	r.StartAll()
	rl := mustLeader(t, r, 30*time.Second)
	t.Logf("restored cluster has a leader (%s) %v after start", rl.ID, time.Since(start).Round(time.Millisecond))
	for _, p := range r.Procs {
		got := rangePrefix(t, r, p, "/load/")
		for k, v := range want {
			if got[k] != v {
				t.Fatalf("%s: %s = %q after restore, want %q", p.ID, k, got[k], v)
			}
		}
		for k := range got {
			if _, ok := want[k]; !ok {
				t.Fatalf("%s: %s present after restore but above the snapshot's revision %d", p.ID, k, saved.Revision)
			}
		}
	}
	if st := jobStatusOf(t, r, rl, job); st.Name != job {
		t.Fatalf("job after restore: %v", st)
	}
	if st := nodeStatus(t, r, rl); len(st.Voters) != 3 {
		t.Fatalf("restored cluster voters %v, want 3", st.Voters)
	}
	t.Logf("restored 3-node cluster holds all %d puts at or below revision %d and job %s", len(want), saved.Revision, job)
}

// TestForceNewClusterMidTraining: two of three nodes die for good during
// a job; the survivor restarted with --force-new-cluster leads alone with
// every write it had applied, two new nodes join, and the job finishes.
func TestForceNewClusterMidTraining(t *testing.T) {
	c := NewCluster(t, binPath, 3)
	c.StartAll()
	l := mustLeader(t, c, 20*time.Second)
	const job = "dr-job"
	softmaxJob(t, c, l, job, 30000, 500, 2)
	acked := putLoad(t, c, "/dr/", 100, make(chan struct{}))
	waitFor(t, 90*time.Second, "4 tasks done", func() bool { return jobStatusOf(t, c, l, job).Done >= 4 })
	var survivor *Proc
	for _, p := range c.Procs {
		if p != l {
			survivor = p
			break
		}
	}
	// The survivor has applied everything the leader committed.
	lst := nodeStatus(t, c, l)
	waitFor(t, 20*time.Second, "the survivor to apply the leader's commit index", func() bool {
		return nodeStatus(t, c, survivor).AppliedIndex >= lst.CommitIndex
	})
	applied := nodeStatus(t, c, survivor).AppliedIndex
	before := rangePrefix(t, c, survivor, "/dr/")
	stBefore := jobStatusOf(t, c, survivor, job)
	doneBefore := stBefore.Done
	for _, p := range c.Procs {
		c.Kill(p)
	}
	if stBefore.State != pb.JobState_JOB_RUNNING || stBefore.Pass > 0 && doneBefore >= stBefore.TotalTasks {
		t.Fatalf("the job was not mid-training at the loss: %v, pass %d, %d of %d tasks", stBefore.State, stBefore.Pass, doneBefore, stBefore.TotalTasks)
	}
	lost := []*Proc{}
	for _, p := range c.Procs {
		if p != survivor {
			lost = append(lost, p)
			os.RemoveAll(p.DataDir) // gone for good
		}
	}
	t.Logf("killed %s and %s for good in pass %d with %d of %d tasks done; survivor %s had applied index %d",
		lost[0].ID, lost[1].ID, stBefore.Pass, doneBefore, stBefore.TotalTasks, survivor.ID, applied)

	start := time.Now()
	plain := survivor.Args
	survivor.Args = append(append([]string(nil), plain...), "--force-new-cluster")
	c.Start(survivor)
	mustLeader(t, c, 30*time.Second)
	t.Logf("survivor leads a new cluster %v after restart with --force-new-cluster", time.Since(start).Round(time.Millisecond))
	st := nodeStatus(t, c, survivor)
	if st.AppliedIndex < applied || len(st.Voters) != 1 {
		t.Fatalf("after --force-new-cluster: applied %d (had %d), voters %v", st.AppliedIndex, applied, st.Voters)
	}
	after := rangePrefix(t, c, survivor, "/dr/")
	for _, p := range acked {
		if after[p.key] != p.value || before[p.key] != p.value {
			t.Fatalf("%s: %q before, %q after recovery, want %q", p.key, before[p.key], after[p.key], p.value)
		}
	}

	for range 2 {
		c.Start(c.AddProc())
	}
	waitFor(t, 60*time.Second, "3 voters", func() bool { return len(nodeStatus(t, c, survivor).Voters) == 3 })
	t.Logf("two new nodes joined: voters %v", nodeStatus(t, c, survivor).Voters)

	waitFor(t, 4*time.Minute, "the job to end", func() bool {
		s := jobStatusOf(t, c, survivor, job)
		return s.State != pb.JobState_JOB_RUNNING && s.State != pb.JobState_JOB_PENDING
	})
	final := jobStatusOf(t, c, survivor, job)
	if final.State != pb.JobState_JOB_SUCCEEDED {
		t.Fatalf("job ended %v: %s", final.State, final.Message)
	}
	if final.Done < doneBefore {
		t.Fatalf("tasks done went back from %d to %d", doneBefore, final.Done)
	}
	t.Logf("job %s succeeded after recovery (%d tasks done before the loss, requeued %d), %v after the restart",
		job, doneBefore, final.Requeued, time.Since(start).Round(time.Second))
}
