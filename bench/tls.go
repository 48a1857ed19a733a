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
	ps    *psclient.Client
	spec  *pb.JobSpec
	slots psclient.StaticResolver
	grads map[string][]float32
	dst   map[string][]float32
}

func (c *tlsCluster) close() {
	if c.ps != nil {
		c.ps.Close()
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
	job := "bench-tls-" + c.name
	spec := &pb.JobSpec{Name: job, Model: &pb.ModelSpec{Name: "external"},
		Dataset:        &pb.DatasetSpec{Path: dataset, Records: 60000},
		RecordsPerTask: 1000, BatchSize: 64, Passes: 1, NumPservers: 2, Mode: pb.UpdateMode_UPDATE_MODE_ASYNC,
		Optimizer: &pb.OptimizerSpec{Name: "sgd", LearningRate: 0.01}}
	for i := range PushPullTensors {
		spec.Params = append(spec.Params, &pb.ParamSpec{Name: fmt.Sprintf("p%d", i), Shape: []int64{PushPullSize}, Init: pb.Initializer_INIT_ZEROS})
	}
	if _, err := admin.Master.SubmitJob(ctx, &pb.SubmitJobRequest{Spec: spec}); err != nil {
		return fmt.Errorf("submit %s: %w", job, err)
	}
	var st *pb.GetJobResponse
	for {
		var err error
		st, err = admin.Master.GetJob(ctx, &pb.GetJobRequest{Name: job})
		served := 0
		if err == nil {
			for _, p := range st.GetStatus().GetPservers() {
				if p.GetAddr() != "" {
					served++
				}
			}
		}
		if served == 2 {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("job %s: slots not served: %v: %w", job, err, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	slots := psclient.StaticResolver{}
	for _, p := range st.GetStatus().GetPservers() {
		slots[p.GetIndex()] = p.GetAddr()
	}
	ps, err := psclient.NewClient(st.GetStatus().GetSpec(), "bench-tls", slots, psclient.WithDialOptions(c.opts...))
	if err != nil {
		return err
	}
	c.ps, c.dst, c.spec, c.slots = ps, ps.NewParams(), st.GetStatus().GetSpec(), slots
	c.grads = map[string][]float32{}
	for k, v := range c.dst {
		c.grads[k] = make([]float32, len(v))
	}
	return nil
}

// pushPull times rounds of Push (zeros) + Pull and returns MB/s of
// float32 bytes moved (2 x 4 x params per round).
func (c *tlsCluster) pushPull(ctx context.Context, rounds int) (float64, error) {
	if c.ps == nil {
		return NA, fmt.Errorf("no pserver client")
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var n int
	for _, v := range c.grads {
		n += len(v)
	}
	start := time.Now()
	for range rounds {
		if err := c.ps.Push(cctx, &psclient.Grads{Dense: c.grads, Examples: 1}); err != nil {
			return NA, err
		}
		if err := c.ps.Pull(cctx, c.dst); err != nil {
			return NA, err
		}
	}
	s := time.Since(start).Seconds()
	if s <= 0 {
		return math.NaN(), nil
	}
	return float64(2*4*n*rounds) / 1e6 / s, nil
}
