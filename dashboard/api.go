package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/schema"
)

// ms is t (Unix nanoseconds) in Unix milliseconds (0 stays 0).
func ms(unixNano int64) int64 { return unixNano / int64(time.Millisecond) }

// raftView is one member's own view of Raft (Cluster.Status asked of it).
type raftView struct {
	State     string `json:"state"`
	Term      uint64 `json:"term"`
	Leader    string `json:"leader"`
	Commit    uint64 `json:"commit_index"`
	Applied   uint64 `json:"applied_index"`
	LastIndex uint64 `json:"last_log_index"`
}

type memberView struct {
	ID       string    `json:"id"`
	Roles    []string  `json:"roles"`
	Status   string    `json:"status"`   // gossip: alive, suspect, dead, left
	Suffrage string    `json:"suffrage"` // voter, nonvoter, none
	GRPCAddr string    `json:"grpc_addr"`
	HTTPAddr string    `json:"http_addr"`
	Raft     *raftView `json:"raft,omitempty"` // nil if the member did not answer
	Error    string    `json:"error,omitempty"`
}

type slotView struct {
	Job         string `json:"job"`
	Slot        int32  `json:"slot"`
	Node        string `json:"node"`
	Addr        string `json:"addr"`
	Incarnation int64  `json:"incarnation"`
	Lease       int64  `json:"lease"`
	// TTL is the lease's remaining seconds (-1: expired or unknown).
	TTL int64 `json:"ttl"`
}

type clusterView struct {
	Node    string         `json:"node"` // the member that answered
	Leader  string         `json:"leader"`
	Term    uint64         `json:"term"`
	Members []memberView   `json:"members"`
	Slots   []slotView     `json:"slots"`
	Events  []clusterEvent `json:"events"`
	Time    int64          `json:"time"`
}

func (d *Dashboard) handleCluster(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), callTimeout)
	defer cancel()
	v, err := d.cluster(ctx)
	if err != nil {
		writeRPCError(w, err)
		return
	}
	writeJSON(w, v)
}

func (d *Dashboard) cluster(ctx context.Context) (*clusterView, error) {
	st, err := d.cl.Cluster.Status(ctx, &pb.StatusRequest{})
	if err != nil {
		return nil, err
	}
	mr, err := d.cl.Cluster.Members(ctx, &pb.MembersRequest{})
	if err != nil {
		return nil, err
	}
	v := &clusterView{Node: st.Id, Leader: st.Leader, Term: st.Term, Time: ms(time.Now().UnixNano()),
		Events: d.events.since(0)}
	v.Members = make([]memberView, len(mr.Members))
	var wg sync.WaitGroup
	for i, m := range mr.Members {
		v.Members[i] = memberView{ID: m.Id, Roles: m.Roles, Status: m.Status, Suffrage: m.Suffrage,
			GRPCAddr: m.GrpcAddr, HTTPAddr: m.HttpAddr}
		if m.Status == "left" || m.GrpcAddr == "" {
			continue
		}
		wg.Add(1)
		go func(mv *memberView) {
			defer wg.Done()
			rv, err := d.memberStatus(ctx, mv.GRPCAddr)
			if err != nil {
				mv.Error = err.Error()
				return
			}
			mv.Raft = rv
		}(&v.Members[i])
	}
	// Slots are read from this node's replica (serializable) so that the
	// page keeps refreshing while there is no leader; lease TTLs need the
	// leader and are left unknown (-1) if it does not answer in time.
	sctx, scancel := context.WithTimeout(ctx, memberTimeout)
	slots, err := d.slots(sctx)
	scancel()
	wg.Wait()
	if err != nil {
		return nil, err
	}
	v.Slots = slots
	sort.Slice(v.Members, func(a, b int) bool { return v.Members[a].ID < v.Members[b].ID })
	return v, nil
}

func (d *Dashboard) memberStatus(ctx context.Context, addr string) (*raftView, error) {
	c, err := d.memberClient(addr)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, memberTimeout)
	defer cancel()
	// Fail fast on a member whose connection is down (the client's
	// default waits for it to come back).
	st, err := c.Cluster.Status(ctx, &pb.StatusRequest{}, grpc.WaitForReady(false))
	if err != nil {
		return nil, fmt.Errorf("no answer from %s: %w", addr, err)
	}
	return &raftView{State: st.RaftState, Term: st.Term, Leader: st.Leader, Commit: st.CommitIndex,
		Applied: st.AppliedIndex, LastIndex: st.LastLogIndex}, nil
}

// slots reads every job's pserver slot records (schema's slot keys) with
// the leases that hold them.
func (d *Dashboard) slots(ctx context.Context) ([]slotView, error) {
	key, end := schema.PrefixRange(schema.JobsPrefix)
	resp, err := d.cl.KV.Range(ctx, &pb.RangeRequest{Key: key, RangeEnd: end, Serializable: true})
	if err != nil {
		return nil, err
	}
	out := []slotView{}
	ttls := map[int64]int64{}
	for _, kv := range resp.Kvs {
		job, kind, id, ok := schema.ParseJobKey(string(kv.Key))
		if !ok || kind != schema.KindSlot {
			continue
		}
		slot, err := schema.ParseSlot(id)
		if err != nil {
			continue
		}
		rec, err := schema.ParseSlotRecord(kv.Value)
		if err != nil {
			continue
		}
		sv := slotView{Job: job, Slot: slot, Node: rec.Node, Addr: rec.Addr, Incarnation: rec.Incarnation, Lease: kv.Lease, TTL: -1}
		if kv.Lease != 0 {
			ttl, seen := ttls[kv.Lease]
			if !seen {
				ttl = -1
				if lr, err := d.cl.Lease.LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{Id: kv.Lease}, grpc.WaitForReady(false)); err == nil {
					ttl = lr.Ttl
				}
				ttls[kv.Lease] = ttl
			}
			sv.TTL = ttl
		}
		out = append(out, sv)
	}
	return out, nil
}

// passView is one pass's evaluation.
type passView struct {
	Pass              int32   `json:"pass"`
	TrainLoss         float64 `json:"train_loss"`
	TestLoss          float64 `json:"test_loss"`
	TestAccuracy      float64 `json:"test_accuracy"`
	Examples          int64   `json:"examples"`
	Step              int64   `json:"step"`
	CheckpointVersion int64   `json:"checkpoint_version"`
}

// checkpointView is one checkpoint version across its slots.
type checkpointView struct {
	Version  int64    `json:"version"`
	Step     int64    `json:"step"`
	Time     int64    `json:"time"`
	Bytes    int64    `json:"bytes"`
	Slots    int      `json:"slots"` // slots whose pointer names this version
	MD5s     []string `json:"md5s"`  // one per slot, by slot
	Replicas []string `json:"replicas"`
	// Accuracy is the test accuracy of the pass evaluated on this version (nil if none).
	Accuracy *float64 `json:"accuracy,omitempty"`
	Best     bool     `json:"best"`
}

type restoreView struct {
	Slot    int32  `json:"slot"`
	Version int64  `json:"version"`
	MD5     string `json:"md5"`
	Source  string `json:"source"`
	Reason  string `json:"reason"`
	Time    int64  `json:"time"`
}

type pserverView struct {
	Slot        int32  `json:"slot"`
	Node        string `json:"node"`
	Addr        string `json:"addr"`
	Incarnation int64  `json:"incarnation"`
}

type jobView struct {
	Name        string           `json:"name"`
	State       string           `json:"state"`
	Message     string           `json:"message,omitempty"`
	Pass        int32            `json:"pass"` // 0-based
	Passes      int32            `json:"passes"`
	Todo        int64            `json:"todo"`
	Pending     int64            `json:"pending"`
	Done        int64            `json:"done"`
	Failed      int64            `json:"failed"`
	TotalTasks  int64            `json:"total_tasks"` // per pass
	Requeued    int64            `json:"requeued"`
	Timeouts    int64            `json:"timeouts"`
	Progress    float64          `json:"progress"` // 0..1 over all passes
	Accuracy    *float64         `json:"accuracy,omitempty"`
	Target      float64          `json:"target_accuracy,omitempty"`
	Model       string           `json:"model,omitempty"`
	Mode        string           `json:"mode,omitempty"`
	NumPservers int32            `json:"num_pservers"`
	Trainers    []string         `json:"trainers"`
	Pservers    []pserverView    `json:"pservers"`
	Metrics     []passView       `json:"metrics"`
	Checkpoints []checkpointView `json:"checkpoints"`
	Restores    []restoreView    `json:"restores"`
	// Replicas is the spec's copies per slot and ReplicasDefault the
	// master's reason when it chose them; ReplicaSlots the slots with a
	// replica record (replicas.go).
	Replicas        int32         `json:"replicas"`
	ReplicasDefault string        `json:"replicas_default,omitempty"`
	ReplicaSlots    []replicaView `json:"replica_slots"`
	EventsSeq       int64         `json:"events_seq"`
	Submitted       int64         `json:"submitted"`
	Finished        int64         `json:"finished,omitempty"`
}

// modelText describes a job's model for people: "mlp, hidden 128-64",
// "hashed_lr, embedding 16 x 1048576 buckets", "softmax", or for a model
// raftps does not implement (jobspec.ModelExternal) its parameter list's size:
// "external: 8 tensors, 421642 parameters". It was "%s %v" of the name
// and hidden widths, "external []" for every PyTorch job.
func modelText(s *pb.JobSpec) string {
	m := s.GetModel()
	if m == nil {
		return ""
	}
	out := m.Name
	if len(m.Hidden) > 0 {
		w := make([]string, len(m.Hidden))
		for i, h := range m.Hidden {
			w[i] = fmt.Sprint(h)
		}
		out += ", hidden " + strings.Join(w, "-")
	}
	if m.EmbeddingDim > 0 || m.HashBuckets > 0 {
		out += fmt.Sprintf(", embedding %d x %d buckets", m.EmbeddingDim, m.HashBuckets)
	}
	if len(s.Params) > 0 {
		var n int64
		for _, p := range s.Params {
			k := int64(1)
			for _, d := range p.Shape {
				k *= d
			}
			n += k
		}
		out += fmt.Sprintf(": %d tensors, %d parameters", len(s.Params), n)
	}
	return out
}

// lowerEnum is an enum's name in lower case without prefix ("running").
func lowerEnum(s, prefix string) string { return strings.ToLower(strings.TrimPrefix(s, prefix)) }

func newJobView(j *pb.JobStatus) jobView {
	v := jobView{Name: j.Name, State: lowerEnum(j.State.String(), "JOB_"), Message: j.Message, Pass: j.Pass,
		Todo: j.Todo, Pending: j.Pending, Done: j.Done, Failed: j.Failed, TotalTasks: j.TotalTasks,
		Requeued: j.Requeued, Timeouts: j.Timeouts, Trainers: j.Trainers, EventsSeq: j.EventsSeq,
		Submitted: ms(j.SubmittedUnixNano), Finished: ms(j.FinishedUnixNano),
		Pservers: []pserverView{}, Metrics: []passView{}, Checkpoints: []checkpointView{}, Restores: []restoreView{}}
	if v.Trainers == nil {
		v.Trainers = []string{}
	}
	if s := j.Spec; s != nil {
		v.Passes, v.Target, v.Mode, v.NumPservers = s.Passes, s.TargetAccuracy, lowerEnum(s.Mode.String(), "UPDATE_MODE_"), s.NumPservers
		v.Model = modelText(s)
		v.Replicas, v.ReplicasDefault = s.Replicas, s.ReplicasDefault
	}
	v.ReplicaSlots = replicaViews(j)
	if all := j.TotalTasks * int64(max(v.Passes, 1)); all > 0 {
		done := int64(j.Pass)*j.TotalTasks + j.Done // pass is 0-based
		if j.State == pb.JobState_JOB_SUCCEEDED {
			done = all
		}
		v.Progress = min(float64(done)/float64(all), 1)
	}
	for _, p := range j.Pservers {
		v.Pservers = append(v.Pservers, pserverView{Slot: p.Index, Node: p.Node, Addr: p.Addr, Incarnation: p.Incarnation})
	}
	accOf := map[int64]float64{}
	for _, m := range j.Metrics {
		v.Metrics = append(v.Metrics, passView{Pass: m.Pass, TrainLoss: m.TrainLoss, TestLoss: m.TestLoss,
			TestAccuracy: m.TestAccuracy, Examples: m.Examples, Step: m.Step, CheckpointVersion: m.CheckpointVersion})
		acc := m.TestAccuracy
		v.Accuracy = &acc
		if m.CheckpointVersion > 0 {
			accOf[m.CheckpointVersion] = m.TestAccuracy
		}
	}
	v.Checkpoints = checkpointViews(j.Checkpoints, accOf)
	for _, r := range j.Restores {
		v.Restores = append(v.Restores, restoreView{Slot: r.Slot, Version: r.Version, MD5: r.Md5, Source: r.Source,
			Reason: r.Reason, Time: ms(r.UnixNano)})
	}
	sort.Slice(v.Restores, func(a, b int) bool { return v.Restores[a].Time < v.Restores[b].Time })
	return v
}

// checkpointViews groups the slots' pointers by version, newest first;
// kept versions count with their md5s. Best is the version with the
// highest accuracy.
func checkpointViews(ptrs []*pb.CheckpointPointer, accOf map[int64]float64) []checkpointView {
	byVersion := map[int64]*checkpointView{}
	md5s := map[int64]map[int32]string{}
	get := func(ver int64) *checkpointView {
		c, ok := byVersion[ver]
		if !ok {
			c = &checkpointView{Version: ver}
			byVersion[ver] = c
			md5s[ver] = map[int32]string{}
		}
		return c
	}
	for slot, p := range ptrs {
		c := get(p.Version)
		c.Step, c.Time, c.Bytes, c.Slots = p.Step, ms(p.TimestampUnixNano), c.Bytes+p.Bytes, c.Slots+1
		c.Replicas = union(c.Replicas, p.Replicas)
		md5s[p.Version][int32(slot)] = p.Md5
		for i, kv := range p.KeptVersions {
			k := get(kv)
			k.Slots++
			if i < len(p.KeptMd5S) {
				md5s[kv][int32(slot)] = p.KeptMd5S[i]
			}
		}
	}
	out := make([]checkpointView, 0, len(byVersion))
	best, bestAcc := int64(-1), -1.0
	for ver, c := range byVersion {
		slots := make([]int32, 0, len(md5s[ver]))
		for s := range md5s[ver] {
			slots = append(slots, s)
		}
		sort.Slice(slots, func(a, b int) bool { return slots[a] < slots[b] })
		c.MD5s = []string{}
		for _, s := range slots {
			c.MD5s = append(c.MD5s, md5s[ver][s])
		}
		if c.Replicas == nil {
			c.Replicas = []string{}
		}
		if acc, ok := accOf[ver]; ok {
			c.Accuracy = &acc
			if acc > bestAcc {
				best, bestAcc = ver, acc
			}
		}
		out = append(out, *c)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Version > out[b].Version })
	for i := range out {
		out[i].Best = out[i].Version == best
	}
	return out
}

func union(a, b []string) []string {
	seen := map[string]bool{}
	for _, s := range a {
		seen[s] = true
	}
	for _, s := range b {
		if !seen[s] {
			a, seen[s] = append(a, s), true
		}
	}
	sort.Strings(a)
	return a
}

func (d *Dashboard) handleJobs(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), callTimeout)
	defer cancel()
	resp, err := d.cl.Master.ListJobs(ctx, &pb.ListJobsRequest{})
	if err != nil {
		writeRPCError(w, err)
		return
	}
	out := make([]jobView, 0, len(resp.Jobs))
	for _, j := range resp.Jobs {
		out = append(out, newJobView(j))
	}
	writeJSON(w, out)
}

func (d *Dashboard) getJob(ctx context.Context, name string) (*jobView, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := d.cl.Master.GetJob(ctx, &pb.GetJobRequest{Name: name})
	if err != nil {
		return nil, err
	}
	v := newJobView(resp.Status)
	d.fillLag(ctx, &v)
	return &v, nil
}

func (d *Dashboard) handleJob(w http.ResponseWriter, r *http.Request) {
	v, err := d.getJob(r.Context(), r.PathValue("job"))
	if err != nil {
		writeRPCError(w, err)
		return
	}
	writeJSON(w, v)
}

func (d *Dashboard) handleCancel(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), callTimeout)
	defer cancel()
	resp, err := d.cl.Master.CancelJob(ctx, &pb.CancelJobRequest{Name: r.PathValue("job")})
	if err != nil {
		writeRPCError(w, err)
		return
	}
	writeJSON(w, newJobView(resp.Status))
}

func (d *Dashboard) handleDelete(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), callTimeout)
	defer cancel()
	resp, err := d.cl.Master.DeleteJob(ctx, &pb.DeleteJobRequest{Name: r.PathValue("job")})
	if err != nil {
		writeRPCError(w, err)
		return
	}
	writeJSON(w, newJobView(resp.Status))
}

// errBadVersion: the version in the path is not a positive integer.
var errBadVersion = errors.New("checkpoint version must be a positive integer")

// errNoVerify: the dashboard has no checkpoint verifier (Config.Verify).
var errNoVerify = errors.New("checkpoint verification is not available on this node")

// verifyResult is the answer of a verify.
type verifyResult struct {
	Job        string `json:"job"`
	Version    int64  `json:"version"`
	OK         bool   `json:"ok"`
	Mismatches any    `json:"mismatches"`
	TookMS     int64  `json:"took_ms"`
}

func (d *Dashboard) handleVerify(w http.ResponseWriter, r *http.Request) {
	ver, err := strconv.ParseInt(r.PathValue("version"), 10, 64)
	if err != nil || ver <= 0 {
		writeError(w, http.StatusBadRequest, fmt.Errorf("%w: %q", errBadVersion, r.PathValue("version")))
		return
	}
	if d.cfg.Verify == nil {
		writeError(w, http.StatusNotImplemented, errNoVerify)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	bad, err := d.cfg.Verify(ctx, r.PathValue("job"), ver)
	if err != nil {
		writeRPCError(w, err)
		return
	}
	res := verifyResult{Job: r.PathValue("job"), Version: ver, OK: len(bad) == 0, Mismatches: bad, TookMS: time.Since(start).Milliseconds()}
	if bad == nil {
		res.Mismatches = []struct{}{}
	}
	writeJSON(w, res)
}
