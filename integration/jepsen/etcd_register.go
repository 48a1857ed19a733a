package jepsen

// The register workload through etcd's Go client (go.etcd.io/etcd/client/v3)
// instead of raftps' own: the same ops, keys, timeouts and checker
// (CheckRegisters, Porcupine), with the requests built by a client raftps
// did not write and sent to raftps' etcd API (raftstore/etcdapi).
// RunEtcdRegisterSuite runs it under the nemesis; TestJepsenEtcdClient is
// the test (etcd_jepsen_test.go).

import (
	"context"
	"crypto/tls"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/raftps/raftps/internal/testing/localcluster"
)

// EtcdConn is etcd's Go client connected to one node only, so that every
// op of the workload goes to the node it names (as RunRegisters' do).
type EtcdConn struct {
	Name   string
	Client *clientv3.Client
}

// EtcdConns holds one EtcdConn per node.
type EtcdConns []*EtcdConn

// DialEtcd makes one etcd client per node (no I/O until first use), with
// mutual TLS tlsCfg (localcluster.ClientTLS of the hosts' admin; nil:
// plaintext, for --insecure hosts). Reconnects back off for at most 1 s,
// like Dial's.
func DialEtcd(names, addrs []string, tlsCfg *tls.Config) (EtcdConns, error) {
	var cs EtcdConns
	for i, addr := range addrs {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, TLS: tlsCfg, Logger: zap.NewNop(),
			DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
				Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
				MinConnectTimeout: time.Second,
			})}})
		if err != nil {
			cs.Close()
			return nil, fmt.Errorf("jepsen: etcd client for %s: %w", addr, err)
		}
		cs = append(cs, &EtcdConn{Name: names[i], Client: cli})
	}
	return cs, nil
}

// Close closes every client.
func (cs EtcdConns) Close() {
	for _, c := range cs {
		_ = c.Client.Close()
	}
}

// RunEtcdRegisters is RunRegisters through etcd's Go client: cfg.Clients
// clients doing get / put / compare-and-swap (a Txn comparing the value)
// on cfg.Keys keys, each op against a random node, until ctx ends, every
// op recorded in h. It returns the acknowledged puts.
func RunEtcdRegisters(ctx context.Context, cfg RegisterConfig, conns EtcdConns, h *History) []AckedPut {
	return runRegisterClients(ctx, cfg, h, func(r *rand.Rand) (string, registerDo) {
		nc := conns[r.IntN(len(conns))]
		return nc.Name, func(ctx context.Context, op *RegisterOp) error {
			return doEtcdRegisterOp(ctx, nc.Client, op, cfg.Serializable)
		}
	})
}

func doEtcdRegisterOp(ctx context.Context, cli *clientv3.Client, op *RegisterOp, serializable bool) error {
	switch op.Kind {
	case RegRead:
		var opts []clientv3.OpOption
		if serializable {
			opts = append(opts, clientv3.WithSerializable())
		}
		resp, err := cli.Get(ctx, op.Key, opts...)
		if err != nil {
			return err
		}
		op.Rev, op.Term = resp.Header.Revision, resp.Header.RaftTerm
		if len(resp.Kvs) > 0 {
			op.Result = string(resp.Kvs[0].Value)
		}
	case RegWrite:
		resp, err := cli.Put(ctx, op.Key, op.Value)
		if err != nil {
			return err
		}
		op.Rev, op.Term = resp.Header.Revision, resp.Header.RaftTerm
	case RegCAS:
		resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Value(op.Key), "=", op.Expect)).
			Then(clientv3.OpPut(op.Key, op.Value)).Commit()
		if err != nil {
			return err
		}
		op.Rev, op.Term = resp.Header.Revision, resp.Header.RaftTerm
		op.OK = resp.Succeeded
	}
	return nil
}

// RunEtcdRegisterSuite is RunSuite with only the register workload, sent
// through etcd's Go client, under cfg's nemesis schedule: it creates the
// hosts, starts the cluster, runs RunEtcdRegisters while the faults
// happen, checks the history with CheckRegisters and writes history.jsonl,
// linearizability.html, logs/ and summary.* to cfg.OutDir. err is set when
// the run could not be carried out, not for a violation (Summary.Valid).
func RunEtcdRegisterSuite(ctx context.Context, cfg SuiteConfig) (sum Summary, err error) {
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if cfg.LogLevel == "" {
		cfg.LogLevel = "info"
	}
	if cfg.CheckTimeout == 0 {
		cfg.CheckTimeout = time.Minute
	}
	if err := os.MkdirAll(cfg.OutDir, 0o755); err != nil {
		return sum, err
	}
	h, err := NewHistory(filepath.Join(cfg.OutDir, "history.jsonl"))
	if err != nil {
		return sum, err
	}
	defer h.Close()
	sum = Summary{Start: h.Start(), Nodes: cfg.Nodes, Binary: cfg.Binary, LogStore: cfg.LogStore, Ops: map[string]int{}, Faults: map[string]int{}}

	hs, err := NewHosts(HostsConfig{Nodes: cfg.Nodes, LogDir: filepath.Join(cfg.OutDir, "logs"), LogStore: cfg.LogStore})
	if err != nil {
		return sum, err
	}
	defer hs.Close()
	dataRoot, err := os.MkdirTemp("", fmt.Sprintf("rps-%d-data-", os.Getpid()))
	if err != nil {
		return sum, err
	}
	unreg := registerCleanup(func() { _ = os.RemoveAll(dataRoot) })
	defer func() { unreg(); _ = os.RemoveAll(dataRoot) }()

	var names, addrs []string
	for _, n := range hs.Nodes {
		if err := n.Start(append([]string{cfg.Binary}, NodeArgs(hs, n, filepath.Join(dataRoot, n.Name), cfg.LogLevel)...)...); err != nil {
			return sum, err
		}
		names = append(names, n.Name)
		addrs = append(addrs, fmt.Sprintf("%s:%d", n.IP, portGRPC))
	}
	defer func() {
		for _, n := range hs.Nodes {
			n.Stop(5 * time.Second)
		}
	}()
	creds, err := hs.DialOptions() // the admin's mutual TLS
	if err != nil {
		return sum, err
	}
	conns, err := Dial(names, addrs, creds...) // raftps' own client: the nemesis finds the leader with it
	if err != nil {
		return sum, err
	}
	defer conns.Close()
	tlsCfg, err := localcluster.ClientTLS(hs.Admin())
	if err != nil {
		return sum, err
	}
	etcd, err := DialEtcd(names, addrs, tlsCfg)
	if err != nil {
		return sum, err
	}
	defer etcd.Close()

	formCtx, cancel := context.WithTimeout(ctx, 90*time.Second)
	leader, err := conns.WaitLeader(formCtx)
	if err == nil {
		_, err = conns.PutFence(formCtx, "/jepsen/fence", "start")
	}
	cancel()
	if err != nil {
		return sum, fmt.Errorf("jepsen: cluster did not form (see %s): %w", hs.LogDir, err)
	}
	cfg.Logf("cluster formed; leader %s; registers through etcd's Go client", leader)
	h.Notef("cluster formed; leader %s; registers through etcd's Go client", leader)

	hold := cfg.Hold
	if hold == 0 {
		hold = 4 * time.Second
	}
	quiet := max(cfg.Workload/time.Duration(len(cfg.Faults)+1)-hold, 2*time.Second)
	nem := NewNemesis(NemesisConfig{Faults: cfg.Faults, Hold: hold, Quiet: quiet, Seed: cfg.Seed}, hs, conns, h)
	wctx, wcancel := context.WithTimeout(ctx, cfg.Workload)
	defer wcancel()
	var (
		wg     sync.WaitGroup
		faults []Fault
	)
	wg.Add(2)
	go func() {
		defer wg.Done()
		RunEtcdRegisters(wctx, RegisterConfig{Clients: 5, Keys: 3, Serializable: cfg.Serializable}, etcd, h)
	}()
	go func() { defer wg.Done(); faults = nem.Run(wctx) }()
	cfg.Logf("workload running for %s with %d faults (hold %s, quiet %s)", cfg.Workload, len(cfg.Faults), hold, quiet)
	wg.Wait()
	_ = hs.Heal()

	regOps := h.RegisterOps()
	regRes, info := CheckRegisters(regOps, cfg.CheckTimeout)
	regRes.Checker = "linearizable-registers (etcd client)"
	sum.Results = []Result{regRes}
	if err := WriteVisualization(filepath.Join(cfg.OutDir, "linearizability.html"), info, faults); err != nil {
		h.Notef("visualization: %v", err)
	}
	sum.Ops["register"] = len(regOps)
	return finishSummary(cfg, h, sum, faults)
}
