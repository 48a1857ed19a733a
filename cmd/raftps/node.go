package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/fsm"
	"github.com/raftps/raftps/gossip"
	"github.com/raftps/raftps/master"
	"github.com/raftps/raftps/pserver"
	"github.com/raftps/raftps/pserver/checkpoint"
	"github.com/raftps/raftps/raftstore"
	"github.com/raftps/raftps/raftstore/client"
	"github.com/raftps/raftps/raftstore/service"
)

// NodeConfig is the configuration of one `raftps node` process.
type NodeConfig struct {
	ID         string
	DataDir    string
	GRPCAddr   string
	RaftAddr   string
	GossipAddr string
	HTTPAddr   string
	// Advertise is the host other nodes use to reach this one (needed when
	// binding to 0.0.0.0); empty announces the bind addresses as they are.
	Advertise string
	// Join lists gossip addresses of existing members.
	Join []string
	// BootstrapExpect: with no existing state, wait for this many server
	// nodes in gossip and bootstrap them together (Consul's bootstrap_expect).
	// 0 with no Join bootstraps a single-node cluster.
	BootstrapExpect int
	Roles           []string
	// DatasetDir, if set, replaces the jobs' dataset path for this node's trainers.
	DatasetDir string
	// GossipKey is the optional gossip encryption key (16, 24 or 32 bytes).
	GossipKey []byte

	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	DeadServerTimeout  time.Duration

	Logger *slog.Logger
}

// Validate checks the configuration.
func (c *NodeConfig) Validate() error {
	if c.ID == "" {
		return errors.New("--id is required")
	}
	if c.DataDir == "" {
		return errors.New("--data-dir is required")
	}
	for _, r := range c.Roles {
		switch r {
		case "server", "pserver", "trainer":
		default:
			return fmt.Errorf("--roles: unknown role %q (known: server, pserver, trainer)", r)
		}
	}
	if !c.hasRole("server") && len(c.Join) == 0 {
		return errors.New("--roles: a node without the server role must --join a cluster (it replicates the metadata as a non-voter)")
	}
	if c.BootstrapExpect < 0 {
		return errors.New("--bootstrap-expect must be >= 0")
	}
	return nil
}

func (c *NodeConfig) hasRole(r string) bool {
	for _, x := range c.Roles {
		if x == r {
			return true
		}
	}
	return false
}

// Node is one raftps node: Raft store, gossip, master, gRPC and HTTP
// servers, and the pserver and trainer agents of its roles.
type Node struct {
	cfg NodeConfig
	log *slog.Logger

	fsm     *fsm.FSM
	store   *raftstore.Store
	gossip  *gossip.Gossip
	fwd     *service.Forwarder
	grpc    *grpc.Server
	grpcLis net.Listener
	http    *http.Server
	httpLis net.Listener
	master  *master.Master
	ckpt    *checkpoint.Manager

	cancel context.CancelFunc
	wg     sync.WaitGroup

	failed    chan error
	failOnce  sync.Once
	closeOnce sync.Once
	closeErr  error
	// onClose run in reverse order at Close (agents registered by roles).
	onClose []func() error
}

// NewNode returns a node; Open starts it.
func NewNode(cfg NodeConfig) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Node{cfg: cfg, log: cfg.Logger.With("node", cfg.ID), failed: make(chan error, 1)}, nil
}

// Failed is closed-with-an-error when the node cannot go on (e.g. its id
// is taken); the caller should Close it and exit non-zero.
func (n *Node) Failed() <-chan error { return n.failed }

func (n *Node) fail(err error) {
	n.failOnce.Do(func() {
		n.log.Error("node failed", "err", err)
		n.failed <- err
	})
}

// GRPCAddr is the bound gRPC address.
func (n *Node) GRPCAddr() string { return n.grpcLis.Addr().String() }

// Store returns the node's Raft store.
func (n *Node) Store() *raftstore.Store { return n.store }

// Open starts the node: stores, gossip, servers, leader loop, agents.
func (n *Node) Open(ctx context.Context) (err error) {
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	if err := os.MkdirAll(n.cfg.DataDir, 0o755); err != nil {
		return fmt.Errorf("data dir %q: %w", n.cfg.DataDir, err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel

	if n.grpcLis, err = net.Listen("tcp", n.cfg.GRPCAddr); err != nil {
		return fmt.Errorf("listen gRPC %s: %w", n.cfg.GRPCAddr, err)
	}
	if n.httpLis, err = net.Listen("tcp", n.cfg.HTTPAddr); err != nil {
		return fmt.Errorf("listen HTTP %s: %w", n.cfg.HTTPAddr, err)
	}

	// Gossip first: the forwarder resolves the leader's gRPC address from it.
	gcfg := gossip.DefaultConfig()
	gcfg.Meta = gossip.Meta{ID: n.cfg.ID, Roles: n.cfg.Roles, GRPCAddr: n.advertised(n.GRPCAddr()),
		RaftAddr: n.advertised(n.cfg.RaftAddr), HTTPAddr: n.advertised(n.httpLis.Addr().String())}
	gcfg.BindAddr = n.cfg.GossipAddr
	if n.cfg.Advertise != "" {
		gcfg.AdvertiseAddr = n.advertised(n.cfg.GossipAddr)
	}
	gcfg.Join = n.cfg.Join
	gcfg.JoinRetryMax = 0
	gcfg.SecretKey = n.cfg.GossipKey
	gcfg.Logger = n.log
	if n.gossip, err = gossip.New(gcfg); err != nil {
		return err
	}
	n.fwd = service.NewForwarder(func(id string) (string, bool) {
		m, ok := n.gossip.Member(id)
		return m.Meta.GRPCAddr, ok
	})

	n.fsm = fsm.New(n.log.With("component", "fsm"))
	rcfg := raftstore.DefaultConfig()
	rcfg.ID = n.cfg.ID
	rcfg.DataDir = n.cfg.DataDir
	rcfg.RaftAddr = n.cfg.RaftAddr
	rcfg.AdvertiseAddr = n.advertised(n.cfg.RaftAddr)
	rcfg.Bootstrap = n.cfg.BootstrapExpect <= 1 && len(n.cfg.Join) == 0 && n.cfg.hasRole("server")
	if n.cfg.HeartbeatTimeout > 0 {
		rcfg.HeartbeatTimeout = n.cfg.HeartbeatTimeout
	}
	if n.cfg.ElectionTimeout > 0 {
		rcfg.ElectionTimeout = n.cfg.ElectionTimeout
	}
	if n.cfg.LeaderLeaseTimeout > 0 {
		rcfg.LeaderLeaseTimeout = n.cfg.LeaderLeaseTimeout
	}
	rcfg.Logger = n.log
	if n.store, err = raftstore.New(rcfg, n.fsm, n.fwd); err != nil {
		return err
	}
	if err := n.store.Open(); err != nil {
		return err
	}
	if err := n.gossip.Open(ctx); err != nil {
		return err
	}
	if len(n.cfg.Join) > 0 {
		// A duplicate --id: the members we join report a conflict for our id
		// before we are in. A node already joined keeps running (the
		// newcomer is the one refused).
		events, unsubscribe := n.gossip.Subscribe()
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			defer unsubscribe()
			for {
				select {
				case <-runCtx.Done():
					return
				case <-n.gossip.JoinedCh():
					return
				case ev, ok := <-events:
					if !ok {
						return
					}
					if ev.Type == gossip.EventConflict && ev.Member.Meta.ID == n.cfg.ID {
						n.fail(fmt.Errorf("--id %q is already used by the member at %s: %w", n.cfg.ID, ev.Member.GossipAddr, gossip.ErrConflict))
						return
					}
				}
			}
		}()
	}

	// One gRPC server for every service; the pserver's transport tuning
	// (window sizes, socket buffers, a non-zeroing buffer pool) serves all.
	n.grpc = grpc.NewServer(pserver.ServerOptions()...)
	service.New(n.store).Register(n.grpc)
	master.NewService(n.store, n.gossip).Register(n.grpc)
	if err := n.openRoles(runCtx); err != nil {
		return err
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		if err := n.grpc.Serve(n.grpcLis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			n.log.Error("gRPC server", "err", err)
		}
	}()

	n.master = master.New(master.Config{DeadServerTimeout: n.cfg.DeadServerTimeout,
		Logger: n.cfg.Logger.With("component", "master")}, n.store, n.gossip)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		_ = n.master.Run(runCtx)
	}()
	if n.cfg.BootstrapExpect > 1 && n.cfg.hasRole("server") {
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			n.bootstrapExpect(runCtx)
		}()
	}

	n.http = &http.Server{Handler: n.httpHandler(), ReadHeaderTimeout: 5 * time.Second}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		if err := n.http.Serve(n.httpLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Error("HTTP server", "err", err)
		}
	}()
	n.log.Info("node started", "grpc", n.GRPCAddr(), "raft", n.cfg.RaftAddr,
		"gossip", n.gossip.LocalAddr(), "http", n.httpLis.Addr().String(), "roles", n.cfg.Roles)
	return nil
}

// advertised is bind with its host replaced by --advertise (if set).
func (n *Node) advertised(bind string) string {
	if n.cfg.Advertise == "" {
		return bind
	}
	_, port, err := net.SplitHostPort(bind)
	if err != nil {
		return bind
	}
	return net.JoinHostPort(n.cfg.Advertise, port)
}

// bootstrapExpect waits until gossip shows BootstrapExpect alive server
// nodes, checks that none of them is already part of a cluster, and then
// bootstraps all of them with the same configuration (Consul's
// bootstrap_expect; identical configurations on every node are safe).
func (n *Node) bootstrapExpect(ctx context.Context) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if has, err := n.hasClusterState(); err != nil || has {
			if err == nil {
				return // restarted node or a cluster exists: the leader adds us
			}
			continue
		}
		var servers []raft.Server
		for _, m := range n.gossip.Members() {
			if m.Status == gossip.StatusAlive && hasRole(m.Meta.Roles, "server") {
				servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(m.Meta.ID), Address: raft.ServerAddress(m.Meta.RaftAddr)})
				// (RaftAddr in gossip metadata is the advertised address.)
			}
		}
		if len(servers) < n.cfg.BootstrapExpect {
			continue
		}
		if n.peersInCluster(ctx, servers) {
			n.log.Info("bootstrap-expect: a cluster exists; waiting to be added by its leader")
			return
		}
		sort.Slice(servers, func(i, j int) bool { return servers[i].ID < servers[j].ID })
		err := n.store.Raft().BootstrapCluster(raft.Configuration{Servers: servers}).Error()
		if err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			n.log.Error("bootstrap-expect: bootstrap failed", "err", err)
			continue
		}
		n.log.Info("bootstrap-expect: bootstrapped", "servers", len(servers))
		return
	}
}

func (n *Node) hasClusterState() (bool, error) {
	servers, err := n.store.Configuration()
	if err != nil {
		return false, err
	}
	return len(servers) > 0, nil
}

// peersInCluster asks each peer whether it already has a Raft configuration.
func (n *Node) peersInCluster(ctx context.Context, servers []raft.Server) bool {
	for _, s := range servers {
		if string(s.ID) == n.cfg.ID {
			continue
		}
		m, ok := n.gossip.Member(string(s.ID))
		if !ok {
			continue
		}
		c, err := client.New([]string{m.Meta.GRPCAddr})
		if err != nil {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := c.Cluster.Status(cctx, &pb.StatusRequest{})
		cancel()
		c.Close()
		if err == nil && (len(st.Voters) > 0 || st.Leader != "") {
			return true
		}
	}
	return false
}

func hasRole(roles []string, r string) bool {
	for _, x := range roles {
		if x == r {
			return true
		}
	}
	return false
}

func (n *Node) httpHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		st := n.store.Stats()
		if st.LeaderID == "" || st.AppliedIndex < st.CommitIndex {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready: leader=%q applied=%d commit=%d\n", st.LeaderID, st.AppliedIndex, st.CommitIndex)
			return
		}
		fmt.Fprintf(w, "ready: leader=%s applied=%d\n", st.LeaderID, st.AppliedIndex)
	})
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	if c, ok := any(n.store).(interface{ Collector() prometheus.Collector }); ok {
		reg.MustRegister(c.Collector())
	}
	reg.MustRegister(newNodeCollector(n))
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return mux
}

// Close shuts down in reverse order: stop accepting RPCs, stop agents and
// the master, hand over leadership and leave, close stores. Safe twice.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		var errs []error
		if n.cancel != nil {
			n.cancel()
		}
		for i := len(n.onClose) - 1; i >= 0; i-- {
			if err := n.onClose[i](); err != nil {
				errs = append(errs, err)
			}
		}
		if n.http != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = n.http.Shutdown(ctx)
			cancel()
		} else if n.httpLis != nil {
			n.httpLis.Close()
		}
		if n.grpc != nil {
			stopped := make(chan struct{})
			go func() { n.grpc.GracefulStop(); close(stopped) }()
			select {
			case <-stopped:
			case <-time.After(3 * time.Second):
				n.grpc.Stop()
			}
		} else if n.grpcLis != nil {
			n.grpcLis.Close()
		}
		if n.store != nil {
			if err := n.store.Close(); err != nil {
				errs = append(errs, fmt.Errorf("close raft store: %w", err))
			}
		}
		if n.gossip != nil {
			if err := n.gossip.Close(); err != nil {
				errs = append(errs, fmt.Errorf("close gossip: %w", err))
			}
		}
		if n.fwd != nil {
			n.fwd.Close()
		}
		n.wg.Wait()
		n.closeErr = errors.Join(errs...)
		n.log.Info("node stopped")
	})
	return n.closeErr
}

// dataDirOf is where role agents keep their files.
func (n *Node) dataDirOf(sub string) string { return filepath.Join(n.cfg.DataDir, sub) }
