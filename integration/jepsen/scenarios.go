package jepsen

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// The scenario tests (scenarios_test.go) run one targeted fault each on a
// fresh cluster, with checkers of their own:
//
//   - CheckSlotServing: from ServeProbes (a Pull on every node's pserver
//     port for every slot, every ProbeEvery), no two claims of one slot
//     (node, incarnation) served in overlapping time, and a node cut off
//     from the others stopped serving within the lease TTL.
//   - CheckSpecFuzz: every fuzzed job spec was refused with InvalidArgument
//     (or ResourceExhausted) or accepted as a job with tasks; nothing else.
//   - CheckCompleteVersions: over the committed checkpoint pointers, in
//     commit order, a version named (current or kept) by every slot's
//     pointer exists at every moment once every slot has committed.

// portPServer is the pserver data port the scenarios give every node
// (--pserver-addr), so that probes reach it from the root namespace.
const portPServer = 7004

// ServeProbe is one Pull of (Job, Slot) on Node's pserver port. Call and
// Return are ns since the run's start.
type ServeProbe struct {
	Node        string `json:"node"`
	Job         string `json:"job"`
	Slot        int32  `json:"slot"`
	Call        int64  `json:"call"`
	Return      int64  `json:"return"`
	OK          bool   `json:"ok"`
	Code        string `json:"code,omitempty"`
	Incarnation int64  `json:"incarnation,omitempty"`
	Version     int64  `json:"version,omitempty"`
}

// ServeProbes pulls every slot of the jobs it is told about from every node,
// every ProbeEvery, until Stop. A hosted slot answers a Pull exactly when
// it accepts pushes (pserver.Server looks both up the same way and a
// fenced slot refuses both), so an answered Pull means "this node served
// the slot at some moment between Call and Return".
type ServeProbes struct {
	h     *History
	conns map[string]pb.PServerClient
	raw   []*grpc.ClientConn
	every time.Duration

	mu     sync.Mutex
	jobs   map[string]int32 // job -> slots
	probes []ServeProbe
	stop   chan struct{}
	done   chan struct{}
}

// StartServeProbes dials addrs (node name -> pserver address) with opts
// (Hosts.DialOptions; plaintext without) and starts probing.
func StartServeProbes(h *History, addrs map[string]string, every time.Duration, opts ...grpc.DialOption) (*ServeProbes, error) {
	p := &ServeProbes{h: h, conns: map[string]pb.PServerClient{}, every: every,
		jobs: map[string]int32{}, stop: make(chan struct{}), done: make(chan struct{})}
	for name, addr := range addrs {
		c, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
		if err != nil {
			p.closeConns()
			return nil, fmt.Errorf("jepsen: dial pserver %s: %w", addr, err)
		}
		p.raw = append(p.raw, c)
		p.conns[name] = pb.NewPServerClient(c)
	}
	go p.loop()
	return p, nil
}

// Watch adds a job with slots slots to the probed set.
func (p *ServeProbes) Watch(job string, slots int32) {
	p.mu.Lock()
	p.jobs[job] = slots
	p.mu.Unlock()
}

func (p *ServeProbes) closeConns() {
	for _, c := range p.raw {
		_ = c.Close()
	}
}

func (p *ServeProbes) loop() {
	defer close(p.done)
	t := time.NewTicker(p.every)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		p.mu.Lock()
		jobs := make(map[string]int32, len(p.jobs))
		for j, n := range p.jobs {
			jobs[j] = n
		}
		p.mu.Unlock()
		var wg sync.WaitGroup
		for node, c := range p.conns {
			for job, n := range jobs {
				for slot := int32(0); slot < n; slot++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						p.probe(node, c, job, slot)
					}()
				}
			}
		}
		wg.Wait()
	}
}

func (p *ServeProbes) probe(node string, c pb.PServerClient, job string, slot int32) {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	pr := ServeProbe{Node: node, Job: job, Slot: slot, Call: p.h.Now()}
	resp, err := c.Pull(ctx, &pb.PullRequest{Job: job, Slot: slot})
	pr.Return = p.h.Now()
	if err == nil {
		pr.OK, pr.Incarnation, pr.Version = true, resp.GetIncarnation(), resp.GetVersion()
	} else {
		pr.Code = status.Code(err).String()
	}
	p.mu.Lock()
	p.probes = append(p.probes, pr)
	p.mu.Unlock()
}

// Serving reports the nodes whose last probe of (job, any slot) answered,
// as node -> slots.
func (p *ServeProbes) Serving(job string) map[string][]int32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	last := map[string]ServeProbe{}
	for _, pr := range p.probes {
		if pr.Job != job {
			continue
		}
		k := fmt.Sprintf("%s/%d", pr.Node, pr.Slot)
		if q, ok := last[k]; !ok || pr.Call > q.Call {
			last[k] = pr
		}
	}
	out := map[string][]int32{}
	for _, pr := range last {
		if pr.OK {
			out[pr.Node] = append(out[pr.Node], pr.Slot)
		}
	}
	return out
}

// Stop stops probing and returns every probe, in call order.
func (p *ServeProbes) Stop() []ServeProbe {
	close(p.stop)
	<-p.done
	p.closeConns()
	p.mu.Lock()
	defer p.mu.Unlock()
	out := append([]ServeProbe(nil), p.probes...)
	sort.Slice(out, func(i, j int) bool { return out[i].Call < out[j].Call })
	return out
}

// ServeInterval is the time a claim (Node, Incarnation) of a slot certainly
// served: from the first answered probe's return to the last one's call (a
// claim serves from its claim to its fence, and an incarnation is never
// reused, so it served all of that span).
type ServeInterval struct {
	Job         string
	Slot        int32
	Node        string
	Incarnation int64
	From, To    int64
	Probes      int
}

// ServeIntervals folds probes into one interval per claim.
func ServeIntervals(probes []ServeProbe) []ServeInterval {
	type key struct {
		job  string
		slot int32
		node string
		inc  int64
	}
	m := map[key]*ServeInterval{}
	var order []key
	for _, pr := range probes {
		if !pr.OK {
			continue
		}
		k := key{pr.Job, pr.Slot, pr.Node, pr.Incarnation}
		iv, ok := m[k]
		if !ok {
			iv = &ServeInterval{Job: pr.Job, Slot: pr.Slot, Node: pr.Node, Incarnation: pr.Incarnation, From: pr.Return, To: pr.Call}
			m[k] = iv
			order = append(order, k)
		}
		iv.From = min(iv.From, pr.Return)
		iv.To = max(iv.To, pr.Call)
		iv.Probes++
	}
	out := make([]ServeInterval, 0, len(order))
	for _, k := range order {
		out = append(out, *m[k])
	}
	return out
}

// SlotServingBounds parameterises CheckSlotServing.
type SlotServingBounds struct {
	// TTL of the pservers' lease: a node cut off from the others must stop
	// serving within it.
	TTL time.Duration
	// Overlap tolerated between two claims of one slot (0: none).
	Overlap time.Duration
	// ProbeSlack is how late a probe may notice a fence (the probe period
	// plus a probe's latency): the upper bound of a fence time may exceed
	// TTL by it, the lower bound may not exceed TTL at all.
	ProbeSlack time.Duration
	// Isolated are faults that cut one node (Target) off from the others;
	// the slots it served when the fault began are checked for the fence.
	Isolated []Fault
}

// CheckSlotServing checks that no two claims of one slot served in
// overlapping time (beyond b.Overlap), and that for each isolating fault
// the isolated node stopped serving every slot it served within b.TTL of
// the fault's start: its last answered probe was called before start+TTL
// and a refused probe returned by start+TTL+ProbeSlack. Stats: "fence-ms-max" (the
// upper bound of the fence time), "min-gap-ms" (the smallest gap between
// one claim's end and the next claim's start of a slot, negative if they
// overlapped).
func CheckSlotServing(probes []ServeProbe, b SlotServingBounds) Result {
	r := newResult("slot-serving")
	r.Stats["probes"] = len(probes)
	ivs := ServeIntervals(probes)
	r.Stats["claims"] = len(ivs)
	bySlot := map[string][]ServeInterval{}
	for _, iv := range ivs {
		k := fmt.Sprintf("%s/%d", iv.Job, iv.Slot)
		bySlot[k] = append(bySlot[k], iv)
	}
	minGap := int64(math.MaxInt64)
	for k, list := range bySlot {
		sort.Slice(list, func(i, j int) bool { return list[i].From < list[j].From })
		for i := range list {
			for j := i + 1; j < len(list); j++ {
				a, c := list[i], list[j]
				gap := c.From - a.To // c starts after a: From sorted
				minGap = min(minGap, gap)
				if -gap > int64(b.Overlap) {
					r.violate("slot %s served by %s (incarnation %d, %s-%s) and %s (incarnation %d, %s-%s): %s of overlap",
						k, a.Node, a.Incarnation, fmtNs(a.From), fmtNs(a.To), c.Node, c.Incarnation, fmtNs(c.From), fmtNs(c.To), fmtNs(-gap))
				}
			}
		}
	}
	if minGap != math.MaxInt64 {
		r.Stats["min-gap-ms"] = int(minGap / 1e6)
	}
	for _, f := range b.Isolated {
		type slotKey struct {
			job  string
			slot int32
		}
		served := map[slotKey]bool{}
		for _, pr := range probes {
			if pr.Node == f.Target && pr.OK && pr.Call < f.Start && pr.Return > f.Start-int64(time.Second) {
				served[slotKey{pr.Job, pr.Slot}] = true
			}
		}
		if len(served) == 0 {
			r.violate("%s on %s at %s: the node served no slot when it began (nothing to fence)", f.Type, f.Target, fmtNs(f.Start))
			continue
		}
		for sk := range served {
			var lastOK, firstRefused int64 = f.Start, -1
			for _, pr := range probes {
				if pr.Node != f.Target || pr.Job != sk.job || pr.Slot != sk.slot || pr.Call < f.Start || pr.Call > f.End {
					continue
				}
				if pr.OK {
					lastOK = max(lastOK, pr.Call)
				} else if pr.Code != codes.DeadlineExceeded.String() && pr.Call > lastOK && firstRefused < 0 {
					firstRefused = pr.Return
				}
			}
			lo, hi := lastOK-f.Start, firstRefused-f.Start
			if firstRefused < 0 {
				r.violate("%s on %s: slot %s/%d never refused a probe during the fault (%s-%s)", f.Type, f.Target, sk.job, sk.slot, fmtNs(f.Start), fmtNs(f.End))
				continue
			}
			r.Notes = append(r.Notes, fmt.Sprintf("%s on %s: slot %s/%d fenced between %s and %s after the fault began (TTL %s)",
				f.Type, f.Target, sk.job, sk.slot, fmtNs(lo), fmtNs(hi), b.TTL))
			r.Stats["fence-ms-max"] = max(r.Stats["fence-ms-max"], int(hi/1e6))
			if lo > int64(b.TTL) || hi > int64(b.TTL+b.ProbeSlack) {
				r.violate("%s on %s: slot %s/%d still served %s after the fault began (fenced by %s), beyond the lease TTL %s",
					f.Type, f.Target, sk.job, sk.slot, fmtNs(lo), fmtNs(hi), b.TTL)
			}
		}
	}
	return r
}

// SpecOutcome is one fuzzed SubmitJob and what came of it.
type SpecOutcome struct {
	Mutation string `json:"mutation"`
	Code     string `json:"code"`
	Message  string `json:"message,omitempty"`
	// State and Tasks of the job after an accepted submit (GetJob).
	State string `json:"state,omitempty"`
	Tasks int64  `json:"tasks,omitempty"`
}

// SpecMutation changes one or more fields of a valid spec to an extreme value.
type SpecMutation struct {
	Name  string
	Apply func(s *pb.JobSpec)
}

// extremeInts are the values fuzzed into integer fields.
var extremeInts = []int64{0, -1, 1, math.MaxInt64, math.MinInt64, math.MaxInt32, math.MinInt32, 1 << 30, 1 << 40, 1<<62 + 1}

// SpecMutations returns the fixed extreme mutations (the issue's:
// MaxInt64 records and records per task, huge shapes, 2^30 virtual shards,
// ...) followed by n random ones drawn with r (each sets 1-3 fields to
// values of extremeInts).
func SpecMutations(r *rand.Rand, n int) []SpecMutation {
	fixed := []SpecMutation{
		{"records=records_per_task=MaxInt64", func(s *pb.JobSpec) { s.Dataset.Records, s.RecordsPerTask = math.MaxInt64, math.MaxInt64 }},
		{"records=MaxInt64,records_per_task=1", func(s *pb.JobSpec) { s.Dataset.Records, s.RecordsPerTask = math.MaxInt64, 1 }},
		{"records=-1", func(s *pb.JobSpec) { s.Dataset.Records = -1 }},
		{"records_per_task=0", func(s *pb.JobSpec) { s.RecordsPerTask = 0 }},
		{"passes=MaxInt32", func(s *pb.JobSpec) { s.Passes = math.MaxInt32 }},
		{"passes=-1", func(s *pb.JobSpec) { s.Passes = -1 }},
		{"hidden=[2^30]", func(s *pb.JobSpec) { s.Model.Hidden = []int32{1 << 30} }},
		{"hidden=[MaxInt32,MaxInt32]", func(s *pb.JobSpec) { s.Model.Hidden = []int32{math.MaxInt32, math.MaxInt32} }},
		{"hidden=[-1]", func(s *pb.JobSpec) { s.Model.Hidden = []int32{-1} }},
		{"num_virtual_shards=2^30", func(s *pb.JobSpec) { s.NumVirtualShards = 1 << 30 }},
		{"num_pservers=MaxInt32", func(s *pb.JobSpec) { s.NumPservers = math.MaxInt32 }},
		{"batch_size=MaxInt32", func(s *pb.JobSpec) { s.BatchSize = math.MaxInt32 }},
		{"max_steps=MaxInt64", func(s *pb.JobSpec) { s.MaxSteps = math.MaxInt64 }},
		{"checkpoint every_steps=MaxInt64,keep_max=MaxInt32,replicas=MaxInt32", func(s *pb.JobSpec) {
			s.Checkpoint = &pb.CheckpointPolicy{EverySteps: math.MaxInt64, KeepMax: math.MaxInt32, Replicas: math.MaxInt32}
		}},
		{"checkpoint every_seconds=MaxInt64", func(s *pb.JobSpec) { s.Checkpoint = &pb.CheckpointPolicy{EverySeconds: math.MaxInt64} }},
		{"task_timeout_floor_ms=MaxInt64", func(s *pb.JobSpec) { s.TaskTimeoutFloorMs = math.MaxInt64 }},
		{"max_task_timeouts=MaxInt32", func(s *pb.JobSpec) { s.MaxTaskTimeouts = math.MaxInt32 }},
		{"staleness=-1", func(s *pb.JobSpec) { s.Staleness = -1 }},
		{"dense_block_size=MaxInt64", func(s *pb.JobSpec) { s.DenseBlockSize = math.MaxInt64 }},
		{"params shape [MaxInt64,2]", func(s *pb.JobSpec) {
			s.Params = []*pb.ParamSpec{{Name: "w", Shape: []int64{math.MaxInt64, 2}}}
		}},
		{"params shape [2^31,2^31]", func(s *pb.JobSpec) {
			s.Params = []*pb.ParamSpec{{Name: "w", Shape: []int64{1 << 31, 1 << 31}}}
		}},
		{"hashed_lr embedding_dim=2^30,hash_buckets=MaxInt64", func(s *pb.JobSpec) {
			s.Model = &pb.ModelSpec{Name: "hashed_lr", EmbeddingDim: 1 << 30, HashBuckets: math.MaxInt64}
		}},
		{"learning_rate=NaN", func(s *pb.JobSpec) { s.Optimizer.LearningRate = math.NaN() }},
		{"learning_rate=+Inf", func(s *pb.JobSpec) { s.Optimizer.LearningRate = math.Inf(1) }},
		{"seed=MinInt64", func(s *pb.JobSpec) { s.Seed = math.MinInt64 }},
	}
	setters := []struct {
		name  string
		int32 bool // an int32 field: v is truncated to 32 bits
		set   func(s *pb.JobSpec, v int64)
	}{
		{"records", false, func(s *pb.JobSpec, v int64) { s.Dataset.Records = v }},
		{"records_per_task", false, func(s *pb.JobSpec, v int64) { s.RecordsPerTask = v }},
		{"passes", true, func(s *pb.JobSpec, v int64) { s.Passes = int32(v) }},
		{"max_steps", false, func(s *pb.JobSpec, v int64) { s.MaxSteps = v }},
		{"batch_size", true, func(s *pb.JobSpec, v int64) { s.BatchSize = int32(v) }},
		{"num_pservers", true, func(s *pb.JobSpec, v int64) { s.NumPservers = int32(v) }},
		{"staleness", true, func(s *pb.JobSpec, v int64) { s.Staleness = int32(v) }},
		{"num_virtual_shards", true, func(s *pb.JobSpec, v int64) { s.NumVirtualShards = int32(v) }},
		{"max_task_timeouts", true, func(s *pb.JobSpec, v int64) { s.MaxTaskTimeouts = int32(v) }},
		{"task_timeout_floor_ms", false, func(s *pb.JobSpec, v int64) { s.TaskTimeoutFloorMs = v }},
		{"dense_block_size", false, func(s *pb.JobSpec, v int64) { s.DenseBlockSize = v }},
		{"hidden[0]", true, func(s *pb.JobSpec, v int64) { s.Model.Hidden = []int32{int32(v)} }},
		{"checkpoint.every_steps", false, func(s *pb.JobSpec, v int64) { s.Checkpoint.EverySteps = v }},
		{"checkpoint.keep_max", true, func(s *pb.JobSpec, v int64) { s.Checkpoint.KeepMax = int32(v) }},
		{"checkpoint.replicas", true, func(s *pb.JobSpec, v int64) { s.Checkpoint.Replicas = int32(v) }},
	}
	out := fixed
	for i := 0; i < n; i++ {
		k := 1 + r.IntN(3)
		var names []string
		var fs []func(*pb.JobSpec)
		for j := 0; j < k; j++ {
			st := setters[r.IntN(len(setters))]
			v := extremeInts[r.IntN(len(extremeInts))]
			if st.int32 {
				v = int64(int32(v)) // the value the field holds
			}
			names = append(names, fmt.Sprintf("%s=%d", st.name, v))
			fs = append(fs, func(s *pb.JobSpec) { st.set(s, v) })
		}
		out = append(out, SpecMutation{Name: fmt.Sprint(names), Apply: func(s *pb.JobSpec) {
			for _, f := range fs {
				f(s)
			}
		}})
	}
	return out
}

// MutatedSpec is base with m applied (base is not modified).
func MutatedSpec(base *pb.JobSpec, name string, m SpecMutation) *pb.JobSpec {
	s := proto.Clone(base).(*pb.JobSpec)
	s.Name = name
	if s.Dataset == nil {
		s.Dataset = &pb.DatasetSpec{}
	}
	if s.Model == nil {
		s.Model = &pb.ModelSpec{}
	}
	if s.Optimizer == nil {
		s.Optimizer = &pb.OptimizerSpec{}
	}
	if s.Checkpoint == nil {
		s.Checkpoint = &pb.CheckpointPolicy{}
	}
	m.Apply(s)
	return s
}

// CheckSpecFuzz checks fuzzed submissions: each must be refused with
// InvalidArgument or ResourceExhausted, or accepted as a job that has
// tasks; any other code (Internal, Unknown, Unavailable from a crashed
// node...) or an accepted job without tasks is a violation.
func CheckSpecFuzz(outs []SpecOutcome) Result {
	r := newResult("spec-fuzz")
	for _, o := range outs {
		switch o.Code {
		case codes.InvalidArgument.String(), codes.ResourceExhausted.String():
			r.Stats["refused"]++
		case codes.OK.String():
			r.Stats["accepted"]++
			if o.Tasks <= 0 {
				r.violate("%s: accepted as a %s job with %d tasks", o.Mutation, o.State, o.Tasks)
			}
		default:
			r.Stats["other"]++
			r.violate("%s: %s: %s", o.Mutation, o.Code, o.Message)
		}
	}
	return r
}

// CheckCompleteVersions replays the committed checkpoint pointers of a
// sync job with slots slots in commit order: once every slot has
// committed a pointer, some version must be named (current or kept) by
// every slot's latest pointer at every moment, i.e. a globally complete
// checkpoint exists. Stats: "moments" checked, "incomplete" moments.
func CheckCompleteVersions(pointers []PointerRecord, slots int32) Result {
	r := newResult("complete-version")
	cur := map[int32]PointerRecord{}
	for i, p := range pointers {
		cur[p.Slot] = p
		if int32(len(cur)) < slots {
			continue
		}
		r.Stats["moments"]++
		count := map[int64]int32{}
		for _, q := range cur {
			seen := map[int64]bool{q.Version: true}
			for _, k := range q.Kept {
				seen[k] = true
			}
			for v := range seen {
				count[v]++
			}
		}
		complete := false
		for _, c := range count {
			if c == slots {
				complete = true
				break
			}
		}
		if !complete {
			r.Stats["incomplete"]++
			var desc []string
			for s := int32(0); s < slots; s++ {
				desc = append(desc, fmt.Sprintf("slot %d: %d kept %v", s, cur[s].Version, cur[s].Kept))
			}
			r.violate("after pointer %d (slot %d version %d): no version is complete: %v", i, p.Slot, p.Version, desc)
		}
	}
	if r.Stats["moments"] == 0 {
		r.Verdict = VerdictUnknown
		r.Notes = append(r.Notes, "no moment with every slot committed")
	}
	return r
}

// CheckNoTimeouts checks a job's events from a run whose faults left every
// trainer running and reachable for less than the task timeout (clock
// steps, a pause shorter than the timeout floor): no task may have been
// requeued for a timeout (TASK_REQUEUED with message "timeout", jobq's
// ExpireTasks) or failed, and the job must not have failed.
func CheckNoTimeouts(evs []*pb.JobEvent) Result {
	r := newResult("no-early-timeouts")
	for _, ev := range evs {
		switch ev.GetType() {
		case pb.JobEvent_TASK_REQUEUED:
			r.Stats["requeued"]++
			if ev.GetMessage() == "timeout" {
				r.violate("task %d of pass %d (trainer %s) requeued for a timeout at %s (the proposer's wall clock)", ev.GetTaskId(), ev.GetPass(), ev.GetTrainer(), time.Unix(0, ev.GetUnixNano()).UTC().Format(time.RFC3339Nano))
			}
		case pb.JobEvent_TASK_FAILED:
			r.violate("task %d of pass %d failed: %s", ev.GetTaskId(), ev.GetPass(), ev.GetMessage())
		case pb.JobEvent_TASK_DONE:
			r.Stats["done"]++
		case pb.JobEvent_JOB_ENDED:
			r.Notes = append(r.Notes, "job ended: "+ev.GetMessage())
		}
	}
	if r.Stats["done"] == 0 {
		r.Verdict = VerdictUnknown
		r.Notes = append(r.Notes, "no task done")
	}
	return r
}
