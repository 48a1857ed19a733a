package bench

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/grpc"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/internal/testing/localcluster"
	"github.com/raftps/raftps/pserver/psclient"
	"github.com/raftps/raftps/raftstore/client"
)

// TLS push+pull job: PushPullTensors dense tensors of PushPullSize float32
// each over 2 pserver slots; one round pushes a gradient of every tensor
// and pulls every tensor back (2 x 4 x tensors x size bytes).
const (
	PushPullTensors = 4
	PushPullSize    = 1 << 20
)

// tlsCluster is one of the security section's two clusters.
type tlsCluster struct {
	name  string
	nodes []*localcluster.Node
	opts  []grpc.DialOption // the admin's (plaintext for --insecure)
	eps   []string
	pool  []Store
	pp    *pushPullJob
}

func (c *tlsCluster) close() {
	if c.pp != nil {
		c.pp.close()
	}
	for _, s := range c.pool {
		s.Close()
	}
	for _, n := range c.nodes {
		n.Kill()
	}
}

// tlsSection measures mutual TLS against plaintext in the same run: two
// 3-node clusters of raftps processes, one --insecure and one on mutual
// TLS 1.3 with encrypted gossip (localcluster's default), both up at
// once; puts of 256 B with 16 clients and pserver push+pull (one Go
// psclient.Client, PushPullTensors x PushPullSize float32 over 2 slots) are
// run A B A B in Pairs pairs. Each row is TLS/plaintext: the median pair
// ratio with its min-max spread.
func (r *runner) tlsSection(ctx context.Context, tmp string) {
	var cs [2]*tlsCluster // 0: TLS (ours), 1: plaintext (base)
	defer func() {
		for _, c := range cs {
			if c != nil {
				c.close()
			}
		}
	}()
	for i, name := range []string{"tls", "plaintext"} {
		c, err := r.startTLSCluster(ctx, filepath.Join(tmp, "tls-"+name), name)
		cs[i] = c
		if err != nil {
			r.note(fmt.Sprintf("security: %s cluster: %v (logs in %s)", name, err, tmp))
			return
		}
	}
	dur, maxOps, rounds := 2*time.Second, int64(20000), 10
	if r.cfg.Quick {
		dur, maxOps, rounds = time.Second, 10000, 4
	}
	var puts, pp [2][]float64
	for i := range cs { // warm-up each: connections, TLS sessions, the pservers' pages
		_, _ = RunLoad(ctx, cs[i].pool, PutWorkload(16), 300*time.Millisecond, 1000)
		_, _ = cs[i].pushPull(ctx, 1)
	}
	for p := 0; p < Pairs; p++ {
		for i, c := range cs {
			tp := NA
			lr, err := RunLoad(ctx, c.pool, PutWorkload(16), dur, maxOps)
			if err != nil {
				r.logf("security %s puts pair %d: %v", c.name, p+1, err)
			} else {
				tp = lr.Throughput()
				r.logf("%-9s put 16 clients pair %d %8.0f ops/s  p50 %6.2f ms  p99 %7.2f ms  (%d ops, %d errors)", c.name, p+1, tp, ms(lr.P50), ms(lr.P99), lr.Ops, lr.Errors)
			}
			puts[i] = append(puts[i], tp)
		}
		for i, c := range cs {
			mbs, err := c.pushPull(ctx, rounds)
			if err != nil {
				r.logf("security %s push+pull pair %d: %v", c.name, p+1, err)
				mbs = NA
			} else {
				r.logf("%-9s push+pull pair %d %8.1f MB/s", c.name, p+1, mbs)
			}
			pp[i] = append(pp[i], mbs)
		}
	}
	r.raw["security/puts16"] = puts
	r.raw["security/pushpull"] = pp
	r.add(pairRow(Row{Section: "security", Metric: "mTLS put 16 clients throughput", Unit: "ops/s", BaseName: "plaintext"}, puts[0], puts[1]))
	r.add(pairRow(Row{Section: "security", Metric: "mTLS pserver push+pull", Unit: "MB/s", BaseName: "plaintext",
		Note: fmt.Sprintf("%d x %d float32, 2 slots, %d rounds", PushPullTensors, PushPullSize, rounds)}, pp[0], pp[1]))
}

// startTLSCluster starts 3 nodes (TLS unless name is "plaintext"), waits
// for a leader, connects 8 stores, submits the push+pull job and opens a
// pserver client on it.
func (r *runner) startTLSCluster(ctx context.Context, dir, name string) (*tlsCluster, error) {
	extra := []string{"--dataset-root", filepath.Dir(r.cfg.Dataset)} // the job names cfg.Dataset
	if name == "plaintext" {
		extra = append(extra, "--insecure")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	nodes, err := localcluster.New(r.cfg.Bin, dir, 3, extra...)
	if err != nil {
		return nil, err
	}
	c := &tlsCluster{name: name, nodes: nodes}
	for _, n := range nodes {
		if err := n.Start(); err != nil {
			return c, err
		}
		c.eps = append(c.eps, n.GRPC)
	}
	if c.opts, err = localcluster.DialOptions(nodes[0].Admin); err != nil {
		return c, err
	}
	admin, err := client.New(c.eps, c.opts...)
	if err != nil {
		return c, err
	}
	defer admin.Close()
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		st, err := admin.Cluster.Status(sctx, &pb.StatusRequest{})
		if err == nil && st.Leader != "" {
			break
		}
		select {
		case <-sctx.Done():
			return c, fmt.Errorf("no leader: %v: %w", err, sctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	for range 8 { // 8 connections, shared by the clients, as kvSection's
		s, err := newRaftpsStore(c.eps, c.opts...)
		if err != nil {
			return c, err
		}
		c.pool = append(c.pool, s)
	}
	return c, c.openPushPull(sctx, admin, r.cfg.Dataset)
}

// openPushPull submits an external-model job of PushPullTensors dense
// tensors over 2 slots and opens a pserver client once both are served.
func (c *tlsCluster) openPushPull(ctx context.Context, admin *client.Client, dataset string) error {
	j, _, err := openPushPullJob(ctx, admin, pushPullSpec("bench-tls-"+c.name, dataset, PushPullTensors, PushPullSize, 1), "bench-tls", c.opts...)
	c.pp = j
	return err
}

func (c *tlsCluster) pushPull(ctx context.Context, rounds int) (float64, error) {
	if c.pp == nil {
		return NA, fmt.Errorf("no pserver client")
	}
	return c.pp.rounds(ctx, rounds)
}

// pushPullSpec is an async external-model job of tensors dense tensors of
// size float32 each (uniform in +-0.01, so every page is written) over 2
// slots, with replicas copies of each slot (the security section: 1).
func pushPullSpec(job, dataset string, tensors int, size int64, replicas int32) *pb.JobSpec {
	spec := &pb.JobSpec{Name: job, Model: &pb.ModelSpec{Name: "external"},
		Dataset:        &pb.DatasetSpec{Path: dataset, Records: 60000},
		RecordsPerTask: 1000, BatchSize: 64, Passes: 1, NumPservers: 2, Mode: pb.UpdateMode_UPDATE_MODE_ASYNC,
		Optimizer: &pb.OptimizerSpec{Name: "sgd", LearningRate: 0.01}, Replicas: replicas}
	for i := range tensors {
		spec.Params = append(spec.Params, &pb.ParamSpec{Name: fmt.Sprintf("p%d", i), Shape: []int64{size}, Init: pb.Initializer_INIT_UNIFORM, Scale: 0.01})
	}
	return spec
}

// pushPullJob is a job driven by one psclient.Client, as a trainer drives
// it: a round pushes a gradient (zeros) of every tensor and pulls every
// tensor back.
type pushPullJob struct {
	ps    *psclient.Client
	grads map[string][]float32
	dst   map[string][]float32
}

// openPushPullJob submits spec and opens a pserver client (as trainer)
// once every slot is served and, for replicas >= 2, every slot's replica
// record names replicas-1 in-sync backups; it returns the job's status
// then.
func openPushPullJob(ctx context.Context, admin *client.Client, spec *pb.JobSpec, trainer string, opts ...grpc.DialOption) (*pushPullJob, *pb.JobStatus, error) {
	job := spec.GetName()
	if _, err := admin.Master.SubmitJob(ctx, &pb.SubmitJobRequest{Spec: spec}); err != nil {
		return nil, nil, fmt.Errorf("submit %s: %w", job, err)
	}
	var st *pb.GetJobResponse
	for {
		var err error
		st, err = admin.Master.GetJob(ctx, &pb.GetJobRequest{Name: job})
		ready := 0
		if err == nil {
			for _, p := range st.GetStatus().GetPservers() {
				if p.GetAddr() != "" && len(p.GetBackups()) >= int(st.GetStatus().GetSpec().GetReplicas())-1 {
					ready++
				}
			}
		}
		if ready == int(spec.GetNumPservers()) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("job %s: slots not served (with their backups): %v: %w", job, err, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	slots := psclient.StaticResolver{}
	for _, p := range st.GetStatus().GetPservers() {
		slots[p.GetIndex()] = p.GetAddr()
	}
	ps, err := psclient.NewClient(st.GetStatus().GetSpec(), trainer, slots, psclient.WithDialOptions(opts...))
	if err != nil {
		return nil, nil, err
	}
	j := &pushPullJob{ps: ps, dst: ps.NewParams(), grads: map[string][]float32{}}
	for k, v := range j.dst {
		j.grads[k] = make([]float32, len(v))
	}
	return j, st.GetStatus(), nil
}

func (j *pushPullJob) close() { j.ps.Close() }

// rounds times n rounds of Push (zeros) + Pull and returns MB/s of
// float32 bytes moved (2 x 4 x params per round).
func (j *pushPullJob) rounds(ctx context.Context, n int) (float64, error) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var params int
	for _, v := range j.grads {
		params += len(v)
	}
	start := time.Now()
	for range n {
		if err := j.ps.Push(cctx, &psclient.Grads{Dense: j.grads, Examples: 1}); err != nil {
			return NA, err
		}
		if err := j.ps.Pull(cctx, j.dst); err != nil {
			return NA, err
		}
	}
	s := time.Since(start).Seconds()
	if s <= 0 {
		return math.NaN(), nil
	}
	return float64(2*4*params*n) / 1e6 / s, nil
}
