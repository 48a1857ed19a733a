package node

import (
	"context"
	"crypto/tls"
	"net/http"
	"sync"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/dashboard"
	"github.com/raftps/raftps/internal/version"
	"github.com/raftps/raftps/jobspec"
	"github.com/raftps/raftps/master"
	pagent "github.com/raftps/raftps/pserver/agent"
	"github.com/raftps/raftps/schema"
)

// grpcMetrics are the gRPC server metrics of every service class
// (go-grpc-middleware's Prometheus provider: grpc_server_started_total,
// grpc_server_handled_total{grpc_code}, grpc_server_msg_received_total,
// grpc_server_msg_sent_total, grpc_server_handling_seconds). One set per
// process: nodes opened in one test process share it.
var grpcMetrics = grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram(
	grpcprom.WithHistogramBuckets(prometheus.ExponentialBuckets(0.0005, 2, 16))))

// grpcMetricsOptions are the server options that feed grpcMetrics.
func grpcMetricsOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(grpcMetrics.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(grpcMetrics.StreamServerInterceptor()),
	}
}

// registerTrainingMetrics adds to reg what the dashboard's Grafana board
// reads beside the Raft store's collector: training metrics per job, the
// gRPC server metrics, the leader gauges, checkpoint timing and build
// information.
func (n *Node) registerTrainingMetrics(reg *prometheus.Registry) {
	reg.MustRegister(grpcMetrics, newTrainingCollector(n), newLeaderMetrics(n), buildInfo(),
		collectors.NewBuildInfoCollector())
	reg.MustRegister(pagent.Collectors()...)
	reg.MustRegister(master.Collectors()...)
}

// dashboardHandler is the web dashboard (package dashboard) over this
// node's client API; the node closes it first on Close.
func (n *Node) dashboardHandler() http.Handler {
	// With TLS the dashboard calls the client API with the node's
	// certificate. Over --http-tls (mutual TLS) it authorises each request
	// by the role of the user's certificate; a request without one (the
	// HTTP port in plaintext) may read only.
	dcfg := dashboard.Config{Endpoints: []string{n.advertised(n.GRPCAddr())}, Verify: dashboardVerify(n.ckpt.Verify),
		ReadOnly: n.tls != nil, DialOptions: n.dial, Logger: n.log.With("component", "dashboard")}
	if n.cfg.HTTPTLS { // the members' /metrics are mutual TLS too: ask with this node's certificate
		dcfg.MetricsTLS = func(host string) *tls.Config { return n.tls.ClientConfig(host) }
	}
	d, err := dashboard.New(dcfg)
	if err != nil {
		n.log.Error("dashboard", "err", err)
		return http.NotFoundHandler()
	}
	n.onClose = append(n.onClose, d.Close)
	return d
}

// buildInfo is raftps_build_info{version, revision, go_version} 1.
func buildInfo() prometheus.Collector {
	in := version.Get() // the release stamp, else the module version and VCS revision
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "raftps_build_info", Help: "Build information; the value is 1.",
		ConstLabels: prometheus.Labels{"version": in.Version, "revision": in.Revision, "go_version": in.GoVersion}})
	g.Set(1)
	return g
}

// leaderMetrics are raftps_raft_has_leader (this node knows a leader) and
// raftps_raft_leader_changes_seen_total (leaders this node has seen
// elected, etcd's etcd_server_leader_changes_seen_total), fed by a Raft
// observer of leader observations.
type leaderMetrics struct {
	n                  *Node
	hasLeader, changes *prometheus.Desc

	mu   sync.Mutex
	seen float64
	last raft.ServerID
}

func newLeaderMetrics(n *Node) *leaderMetrics {
	c := prometheus.Labels{"node": n.cfg.ID}
	m := &leaderMetrics{n: n,
		hasLeader: prometheus.NewDesc("raftps_raft_has_leader", "1 if this node knows a Raft leader, else 0.", nil, c),
		changes:   prometheus.NewDesc("raftps_raft_leader_changes_seen_total", "Raft leaders this node has seen elected since it started.", nil, c),
	}
	r := n.store.Raft()
	if r == nil {
		return m
	}
	if _, id := r.LeaderWithID(); id != "" {
		m.seen, m.last = 1, id
	}
	ch := make(chan raft.Observation, 16)
	obs := raft.NewObserver(ch, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	r.RegisterObserver(obs)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case o := <-ch:
				lo := o.Data.(raft.LeaderObservation)
				m.mu.Lock()
				if lo.LeaderID != "" && lo.LeaderID != m.last {
					m.seen++
					m.last = lo.LeaderID
				}
				m.mu.Unlock()
			case <-done:
				return
			}
		}
	}()
	n.onClose = append(n.onClose, func() error {
		r.DeregisterObserver(obs)
		close(done)
		return nil
	})
	return m
}

func (m *leaderMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.hasLeader
	ch <- m.changes
}

func (m *leaderMetrics) Collect(ch chan<- prometheus.Metric) {
	has := 0.0
	if m.n.store.Stats().LeaderID != "" {
		has = 1
	}
	m.mu.Lock()
	seen := m.seen
	m.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(m.hasLeader, prometheus.GaugeValue, has)
	ch <- prometheus.MustNewConstMetric(m.changes, prometheus.CounterValue, seen)
}

// trainingCollector exports each job's training progress from this node's
// FSM replica (every node exports the same values; the job_name label
// tells the jobs apart), read at scrape time. Counters over events (examples, task
// results, restores) are summed from the job's retained events as the
// scrapes see them: a job whose events were pruned between two scrapes
// undercounts.
type trainingCollector struct {
	n *Node

	tasks, pass, trainLoss, testLoss, testAcc, examples, doneTasks, restores, requeued, ckptBytes, ckptVersion *prometheus.Desc

	mu   sync.Mutex
	jobs map[string]*jobTally
}

// jobTally is what a collector has summed from one job's events.
type jobTally struct {
	next               int64 // next event seq to read
	examples, done     float64
	restores, lastLoss float64
	hasLoss            bool
}

func newTrainingCollector(n *Node) *trainingCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		// "job_name", not "job": Prometheus gives every scraped series
		// its target's job label and would rename ours to exported_job.
		return prometheus.NewDesc(name, help, append([]string{"job_name"}, labels...), nil)
	}
	return &trainingCollector{n: n, jobs: map[string]*jobTally{},
		tasks:       d("raftps_job_tasks", "Tasks of the job's current pass by state (todo, pending, done, failed).", "state"),
		pass:        d("raftps_job_pass", "The job's current pass (0-based, as in PassMetric.pass)."),
		trainLoss:   d("raftps_job_train_loss", "Training loss of the job's newest finished task."),
		testLoss:    d("raftps_job_test_loss", "Test loss of the job's newest evaluated pass."),
		testAcc:     d("raftps_job_test_accuracy", "Test accuracy (0..1) of the job's newest evaluated pass."),
		examples:    d("raftps_job_examples_total", "Training examples of the job's finished tasks (rate() is examples/s)."),
		doneTasks:   d("raftps_job_tasks_done_total", "Tasks the job finished, over all passes."),
		restores:    d("raftps_job_restores_total", "pserver slot restores and rollbacks of the job (PSERVER_RESTORED events)."),
		requeued:    d("raftps_job_requeued_total", "Tasks of the job requeued (timeouts, dead trainers)."),
		ckptBytes:   d("raftps_job_checkpoint_bytes", "Bytes of the job's newest checkpoint (sum over its slots' pointers)."),
		ckptVersion: d("raftps_job_checkpoint_version", "The job's newest checkpoint version (highest over its slots' pointers)."),
	}
}

func (c *trainingCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.tasks, c.pass, c.trainLoss, c.testLoss, c.testAcc, c.examples, c.doneTasks, c.restores, c.requeued, c.ckptBytes, c.ckptVersion} {
		ch <- d
	}
}

// maxEventsPerScrape bounds the events one scrape reads per job.
const maxEventsPerScrape = 100_000

func (c *trainingCollector) Collect(ch chan<- prometheus.Metric) {
	jobs := c.n.fsm.Jobs()
	c.mu.Lock()
	defer c.mu.Unlock()
	live := map[string]bool{}
	for _, j := range jobs.Jobs() {
		live[j.Name] = true
		g := func(d *prometheus.Desc, v float64, labels ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{j.Name}, labels...)...)
		}
		cnt := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, j.Name)
		}
		g(c.tasks, float64(j.Todo), "todo")
		g(c.tasks, float64(j.Pending), "pending")
		g(c.tasks, float64(j.Done), "done")
		g(c.tasks, float64(j.Failed), "failed")
		g(c.pass, float64(j.Pass))
		if k := len(j.Metrics); k > 0 {
			g(c.testLoss, j.Metrics[k-1].TestLoss)
			g(c.testAcc, j.Metrics[k-1].TestAccuracy)
		}
		cnt(c.requeued, float64(j.Requeued))

		t := c.jobs[j.Name]
		if t == nil {
			t = &jobTally{next: 1}
			c.jobs[j.Name] = t
		}
		for read := 0; read < maxEventsPerScrape; {
			evs, err := jobs.Events(j.Name, t.next, 1000)
			if err != nil {
				// Older events are gone: go on from the oldest kept.
				if oldest := jobs.EventSeq(j.Name) - jobspec.MaxEvents + 1; oldest > t.next {
					t.next = oldest
					continue
				}
				break
			}
			if len(evs) == 0 {
				break
			}
			for _, ev := range evs {
				switch ev.Type {
				case pb.JobEvent_TASK_DONE:
					t.examples += float64(ev.Examples)
					t.done++
					t.lastLoss, t.hasLoss = ev.Loss, true
				case pb.JobEvent_PSERVER_RESTORED:
					t.restores++
				}
				t.next = ev.Seq + 1
			}
			read += len(evs)
		}
		if t.hasLoss {
			g(c.trainLoss, t.lastLoss)
		}
		cnt(c.examples, t.examples)
		cnt(c.doneTasks, t.done)
		cnt(c.restores, t.restores)
		c.collectCheckpoint(j.Name, g)
	}
	for name := range c.jobs {
		if !live[name] {
			delete(c.jobs, name)
		}
	}
}

// collectCheckpoint exports the newest checkpoint version of a job and
// its bytes, read from the slots' pointers in this node's replica.
func (c *trainingCollector) collectCheckpoint(job string, g func(*prometheus.Desc, float64, ...string)) {
	key, end := schema.PrefixRange(schema.CheckpointPrefix(job))
	resp, err := c.n.fsm.Range(&pb.RangeRequest{Key: key, RangeEnd: end})
	if err != nil || len(resp.Kvs) == 0 {
		return
	}
	var version, bytes int64
	for _, kv := range resp.Kvs {
		p, err := schema.ParsePointer(kv.Value)
		if err != nil {
			continue
		}
		switch {
		case p.Version > version:
			version, bytes = p.Version, p.Bytes
		case p.Version == version:
			bytes += p.Bytes
		}
	}
	if version > 0 {
		g(c.ckptVersion, float64(version))
		g(c.ckptBytes, float64(bytes))
	}
}

// dashboardVerify adapts a checkpoint verifier (checkpoint.Manager.Verify)
// to dashboard.VerifyFunc, which takes no pserver type.
func dashboardVerify[T any](verify func(context.Context, string, int64) ([]T, error)) dashboard.VerifyFunc {
	return func(ctx context.Context, job string, version int64) ([]any, error) {
		bad, err := verify(ctx, job, version)
		out := make([]any, len(bad))
		for i := range bad {
			out[i] = bad[i]
		}
		return out, err
	}
}
