package node

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"google.golang.org/grpc"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/fsm"
	"github.com/raftps/raftps/gossip"
	"github.com/raftps/raftps/master"
	"github.com/raftps/raftps/pserver"
	pagent "github.com/raftps/raftps/pserver/agent"
	"github.com/raftps/raftps/pserver/checkpoint"
	"github.com/raftps/raftps/pserver/wire"
	"github.com/raftps/raftps/raftstore"
	"github.com/raftps/raftps/raftstore/etcdapi"
	"github.com/raftps/raftps/raftstore/service"
	"github.com/raftps/raftps/security"
)

// Node is one raftps node: Raft store, gossip, master, gRPC and HTTP
// servers, and the pserver and trainer agents of its roles. Lifecycle:
// New, then Open and Close (or Run, which does both); Close is safe twice
// and after a failed Open.
type Node struct {
	cfg Config
	log *slog.Logger
	// instance is this process's pserver instance (random at each start;
	// announced in gossip, pserver/agent's Config.Instance).
	instance string

	fsm    *fsm.FSM
	store  *raftstore.Store
	disk   *raftstore.DiskGuard
	gossip *gossip.Gossip
	fwd    *service.Forwarder
	grpcServers
	http    *http.Server
	httpLis net.Listener
	master  *master.Master
	// suspects confirms reports of suspect primaries of replicated slots
	// (master.Suspects): the client port's and the trainer agent's.
	suspects *master.Suspects
	ckpt     *checkpoint.Manager
	ps       *pserver.Server // nil without the pserver role
	// tls is the node's TLS material (nil: plaintext, --insecure); dial
	// are the options of every gRPC dial the node makes (its certificate).
	tls  *security.Material
	dial []grpc.DialOption
	// keyring holds the gossip keys (nil without --gossip-keyring-file).
	keyring *memberlist.Keyring

	lock   *dirLock // <DataDir>/LOCK, held from Open to the end of Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	failed    chan error
	failOnce  sync.Once
	closeOnce sync.Once
	closeErr  error
	// onClose run in reverse order at Close (agents registered by roles).
	onClose []func() error
}

// New validates cfg and returns a node; it does no I/O (Open does).
func New(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if ps, tr := defaultBudgets(); cfg.PServerMemoryBudget == 0 || cfg.TrainerMemoryBudget == 0 {
		cfg.PServerMemoryBudget = cmp.Or(cfg.PServerMemoryBudget, ps)
		cfg.TrainerMemoryBudget = cmp.Or(cfg.TrainerMemoryBudget, tr)
	}
	return &Node{cfg: cfg, log: cfg.Logger.With("node", cfg.ID), instance: pagent.NewInstance(), failed: make(chan error, 1)}, nil
}

// Run opens the node, serves until ctx ends (SIGINT/SIGTERM in `raftps
// node`) or the node fails (Failed), and closes it. It returns the error
// that stopped it: Open's, the failure's, or Close's.
func (n *Node) Run(ctx context.Context) error {
	if err := n.Open(ctx); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		n.log.Info("shutting down", "cause", context.Cause(ctx))
		return n.Close()
	case err := <-n.failed:
		n.Close()
		return err
	}
}

// Failed yields an error when the node cannot go on (e.g. its ID is taken
// by a live member); the caller should Close it and exit non-zero.
func (n *Node) Failed() <-chan error { return n.failed }

func (n *Node) fail(err error) {
	n.failOnce.Do(func() {
		n.log.Error("node failed", "err", err)
		n.failed <- err
	})
}

// GRPCAddr is the bound address of the gRPC client API (valid after Open).
func (n *Node) GRPCAddr() string { return n.clientLis.Addr().String() }

// PeerAddr is the bound address of the node-to-node services (valid after Open).
func (n *Node) PeerAddr() string { return n.peerLis.Addr().String() }

// PServerAddr is the bound address of the pserver data path (valid after Open).
func (n *Node) PServerAddr() string { return n.pserverLis.Addr().String() }

// HTTPAddr is the bound address of the HTTP server (valid after Open).
func (n *Node) HTTPAddr() string { return n.httpLis.Addr().String() }

// Store returns the node's Raft store (valid after Open).
func (n *Node) Store() *raftstore.Store { return n.store }

// Open starts the node: data dir lock, stores, gossip, servers, leader
// loop, agents. ctx bounds the start-up only: no step waits for anything
// that may never come (the data dir lock fails at once with
// ErrDataDirLocked if another process holds it; gossip joins in the
// background), and Open checks ctx between steps, returning its error if
// it ended; the node then runs until Close. On error Open closes what it
// started.
func (n *Node) Open(ctx context.Context) (err error) {
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	if err := n.openDataDir(); err != nil {
		return err
	}
	if err := context.Cause(ctx); err != nil {
		return fmt.Errorf("start-up interrupted: %w", err)
	}
	if err := n.openSecurity(); err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel

	if err := n.openListeners(); err != nil {
		return err
	}
	// Gossip first: the forwarder resolves the leader's gRPC address from it.
	if err := n.openGossip(); err != nil {
		return err
	}
	if err := n.openStore(); err != nil {
		return err
	}
	if err := context.Cause(ctx); err != nil {
		return fmt.Errorf("start-up interrupted: %w", err)
	}
	// Subscribed before Open: the background join's first attempt can
	// report a conflict for our ID before Open returns.
	var conflicts <-chan gossip.Event
	unsubscribe := func() {}
	if len(n.cfg.Join) > 0 {
		conflicts, unsubscribe = n.gossip.Subscribe()
	}
	if err := n.gossip.Open(ctx); err != nil {
		unsubscribe()
		return err
	}
	if conflicts != nil {
		n.watchIDConflict(runCtx, conflicts, unsubscribe)
	}
	if err := n.openServices(runCtx); err != nil {
		return err
	}
	if err := context.Cause(ctx); err != nil {
		return fmt.Errorf("start-up interrupted: %w", err)
	}
	n.startServers()
	n.startLoops(runCtx)
	n.startHTTP()
	n.log.Info("node started", "grpc", n.GRPCAddr(), "peer", n.PeerAddr(), "pserver", n.PServerAddr(), "raft", n.cfg.RaftAddr,
		"gossip", n.gossip.LocalAddr(), "http", n.HTTPAddr(), "roles", n.cfg.Roles)
	return nil
}

// openDataDir makes the data dir private and takes its lock (Open's
// first step).
func (n *Node) openDataDir() (err error) {
	if err := n.privateDataDir(); err != nil {
		return err
	}
	// Before anything in the data dir is opened: bolt's flock has no
	// timeout, so a second process on the same dir would wait forever.
	if n.lock, err = lockDataDir(n.cfg.DataDir); err != nil {
		return err
	}
	return nil
}

// openSecurity starts the disk guard and loads the node's TLS material
// (none with --insecure), refusing a certificate whose role is not node.
func (n *Node) openSecurity() (err error) {
	n.disk = raftstore.NewDiskGuard(n.cfg.DataDir, n.cfg.DiskReserve)
	if n.cfg.TLS.Enabled() {
		if n.tls, err = security.Load(n.cfg.TLS, n.log.With("component", "tls")); err != nil {
			return err
		}
		if r := security.RoleOf(n.tls.Leaf()); r != security.RoleNode {
			return fmt.Errorf("--tls-cert-file %q: %w: role %q (make one with `raftps tls cert create --node %s`)",
				n.cfg.TLS.Cert, security.ErrNotNode, r, n.cfg.ID)
		}
		n.dial = n.tls.DialOptions()
	}
	return nil
}

// openListeners binds the client, node-to-node, pserver and HTTP ports.
func (n *Node) openListeners() (err error) {
	if n.clientLis, err = net.Listen("tcp", n.cfg.GRPCAddr); err != nil {
		return fmt.Errorf("listen gRPC %s: %w", n.cfg.GRPCAddr, err)
	}
	if n.peerLis, err = listenClass(n.cfg.PeerAddr, n.cfg.GRPCAddr, listenTCP); err != nil {
		return fmt.Errorf("listen node-to-node gRPC %s: %w", n.cfg.PeerAddr, err)
	}
	// The pserver port's sockets get wire.SocketBufferBytes buffers.
	if n.pserverLis, err = listenClass(n.cfg.PServerAddr, n.cfg.GRPCAddr, wire.Listen); err != nil {
		return fmt.Errorf("listen pserver gRPC %s: %w", n.cfg.PServerAddr, err)
	}
	if n.httpLis, err = net.Listen("tcp", n.cfg.HTTPAddr); err != nil {
		return fmt.Errorf("listen HTTP %s: %w", n.cfg.HTTPAddr, err)
	}
	if n.cfg.HTTPTLS {
		n.httpLis = tls.NewListener(n.httpLis, n.httpTLSConfig())
	}
	n.httpLis = newHTTPListener(n.httpLis)
	return nil
}

// openGossip creates the gossip member (joined later, in Open) and the
// forwarder that resolves the leader's node-to-node address from it.
func (n *Node) openGossip() (err error) {
	gcfg := gossip.DefaultConfig()
	gcfg.Meta = gossip.Meta{ID: n.cfg.ID, Roles: n.cfg.Roles, GRPCAddr: n.advertised(n.GRPCAddr()),
		RaftAddr: n.advertised(n.cfg.RaftAddr), HTTPAddr: n.advertised(n.HTTPAddr()),
		PeerAddr: n.advertised(n.PeerAddr()), Zone: n.cfg.Zone}
	if n.cfg.hasRole(gossip.RolePServer) {
		gcfg.Meta.PServerAddr = n.advertised(n.PServerAddr())
		gcfg.Meta.PServerInstance = n.instance
		gcfg.Meta.PServerBudget = n.cfg.PServerMemoryBudget // budget.go
	}
	if n.cfg.hasRole(gossip.RoleTrainer) {
		gcfg.Meta.TrainerBudget = n.cfg.TrainerMemoryBudget
	}
	gcfg.BindAddr = n.cfg.GossipAddr
	if n.cfg.Advertise != "" {
		gcfg.AdvertiseAddr = n.advertised(n.cfg.GossipAddr)
	}
	gcfg.Join = n.cfg.Join
	gcfg.JoinRetryMax = 0
	if n.keyring, err = n.openKeyring(); err != nil {
		return err
	}
	gcfg.Keyring = n.keyring
	gcfg.Logger = n.log
	if n.gossip, err = gossip.New(gcfg); err != nil {
		return err
	}
	n.fwd = service.NewForwarder(func(id string) (string, bool) {
		m, ok := n.gossip.Member(id)
		return m.Meta.Peer(), ok
	}, n.dial...)
	return nil
}

// openStore creates and opens the FSM and the Raft store, and the gated
// store the services and agents use.
func (n *Node) openStore() (err error) {
	n.fsm = fsm.New(n.log.With("component", "fsm"))
	rcfg := raftstore.DefaultConfig()
	rcfg.ID = n.cfg.ID
	rcfg.DataDir = n.cfg.DataDir
	rcfg.LogStore = n.cfg.RaftLogStore
	rcfg.LogVerifyInterval = n.cfg.RaftLogVerifyInterval
	rcfg.RaftAddr = n.cfg.RaftAddr
	rcfg.AdvertiseAddr = n.advertised(n.cfg.RaftAddr)
	rcfg.ForceNewCluster = n.cfg.ForceNewCluster
	rcfg.MaxTxnOps = n.cfg.MaxTxnOps
	rcfg.QuotaBackendBytes = n.cfg.QuotaBackendBytes
	rcfg.Bootstrap = n.cfg.BootstrapExpect <= 1 && len(n.cfg.Join) == 0 && n.cfg.hasRole(gossip.RoleServer)
	rcfg.HeartbeatTimeout, rcfg.ElectionTimeout, rcfg.LeaderLeaseTimeout = RaftTimeouts(n.cfg.HeartbeatInterval, n.cfg.ElectionTimeout)
	rcfg.Logger = n.log
	rcfg.TLS = n.tls
	rcfg.Disk = n.disk // every write asks it (raftstore.Config.Disk)
	if n.store, err = raftstore.New(rcfg, n.fsm, n.fwd); err != nil {
		return err
	}
	if err := n.store.Open(); err != nil {
		return err
	}
	return nil
}

// openServices creates the three gRPC servers, registers the services on
// them and opens the agents of the node's roles.
func (n *Node) openServices(runCtx context.Context) error {
	ports := fmt.Sprintf("client API %s, node-to-node %s, pserver %s", n.GRPCAddr(), n.PeerAddr(), n.PServerAddr())
	clientOpts, peerOpts, pserverOpts := n.serverSecurity()
	n.client = clientClass.newServer(ports, append(clientOpts, grpc.ChainUnaryInterceptor(n.statusErrors, roleValueLimit))...)
	n.peer = peerClass.newServer(ports, peerOpts...)
	n.pserver = pserverClass.newServer(ports, pserverOpts...)
	// service.Register registers KV, Lease, Watch and Internal; each
	// server's tap handle refuses what its class does not serve.
	svc := service.New(n.store)
	svc.Register(n.client)
	svc.Register(n.peer)
	ms := master.NewService(n.store, n.gossip)
	ms.CheckDataset = n.checkDataset // confined to the dataset roots (security.go)
	ms.TLS = n.tls != nil            // status: tls on/off
	ms.Progress = n.fwd.RaftProgress // member promote asks the learner
	n.suspects = master.NewSuspects(n.store, n.gossip, n.probePServer, n.cfg.PServerFailoverTimeout, n.log.With("component", "suspects"))
	ms.Suspects = n.suspects // replicated slots' fast detection (issue 34)
	ms.Logger = n.log
	ms.Register(n.client)
	kr := &keyringService{n: n} // `raftps keyring`: admins on the client port, the fan-out on the peer port
	pb.RegisterKeyringServer(n.client, kr)
	pb.RegisterKeyringServer(n.peer, kr)
	// etcd's v3 API (etcdserverpb) over the same store, for etcdctl and
	// etcd's clients.
	etcdapi.New(n.store, n.gossip).Register(n.client)
	return n.openRoles(runCtx)
}

// startServers serves the three gRPC servers on their listeners.
func (n *Node) startServers() {
	for _, s := range []struct {
		srv *grpc.Server
		lis net.Listener
		cls serviceClass
	}{{n.client, n.clientLis, clientClass}, {n.peer, n.peerLis, peerClass}, {n.pserver, n.pserverLis, pserverClass}} {
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			if err := s.srv.Serve(s.lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
				n.log.Error("gRPC server", "class", s.cls.name, "err", err)
			}
		}()
	}
}

// startLoops starts the master's leader loop and, with
// --bootstrap-expect > 1 on a server, the bootstrap wait.
func (n *Node) startLoops(runCtx context.Context) {
	n.master = master.New(master.Config{DeadServerTimeout: n.cfg.DeadServerTimeout,
		KeepFinishedJobs: n.cfg.KeepFinishedJobs, FinishedJobMaxAge: n.cfg.FinishedJobMaxAge,
		OnLeader: n.checkPrimaries, Logger: n.cfg.Logger.With("component", "master")}, n.store, n.gossip)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		_ = n.master.Run(runCtx)
	}()
	// Gossip's suspicion of a replicated slot's primary, reported (probe,
	// then failover) while this node leads (issue 34: fast detection).
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.suspects.FollowGossip(runCtx)
	}()
	if n.cfg.BootstrapExpect > 1 && n.cfg.hasRole(gossip.RoleServer) {
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			n.bootstrapExpect(runCtx)
		}()
	}
}

// checkPrimaries is the master's OnLeader: as this node takes office it
// checks every replicated slot's primary (master.Suspects.CheckAll), so
// a primary that died with the old leader is failed over without waiting
// for a report or for gossip.
func (n *Node) checkPrimaries(ctx context.Context) {
	if v := n.suspects.CheckAll(ctx, "the Raft leader took office"); len(v) > 0 {
		n.log.Info("leader took office: every replicated slot's primary checked", "verdicts", v)
	}
}

// startHTTP serves the HTTP server (metrics, health, dashboard).
func (n *Node) startHTTP() {
	// ErrorLog: refused TLS handshakes (no or a foreign client
	// certificate) go to the node's log, not to the standard logger.
	n.http = &http.Server{Handler: n.httpHandler(), ReadHeaderTimeout: security.HandshakeTimeout,
		IdleTimeout: httpIdleTimeout, ConnState: n.httpLis.(*httpListener).connState,
		ErrorLog: slog.NewLogLogger(n.log.With("component", "http").Handler(), slog.LevelWarn)}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		if err := n.http.Serve(n.httpLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Error("HTTP server", "err", err)
		}
	}()
}

// watchIDConflict fails the node if the members it joins report a conflict
// for its ID before it is in (a duplicate --id), from events (a
// subscription taken before gossip opened; unsubscribe ends it). A node
// already joined keeps running: the newcomer is the one refused.
func (n *Node) watchIDConflict(ctx context.Context, events <-chan gossip.Event, unsubscribe func()) {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer unsubscribe()
		for {
			select {
			case <-ctx.Done():
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

// advertised is bind with its host replaced by Config.Advertise (if set).
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

// Close shuts down in reverse order: stop agents and the master, stop
// accepting RPCs, hand over leadership and leave, close stores. Safe
// twice; the second call returns the first one's result.
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
		n.grpcServers.stop(3 * time.Second)
		if n.store != nil {
			if err := n.store.Close(); err != nil && !errors.Is(err, raftstore.ErrNotOpen) {
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
		if n.disk != nil {
			if err := n.disk.Close(); err != nil {
				errs = append(errs, fmt.Errorf("close disk guard: %w", err))
			}
		}
		if err := n.lock.release(); err != nil {
			errs = append(errs, fmt.Errorf("release data dir lock: %w", err))
		}
		n.closeErr = errors.Join(errs...)
		n.log.Info("node stopped")
	})
	return n.closeErr
}

// stop stops the servers gracefully, in parallel, or at once after
// timeout; it closes the listeners of servers never started.
func (g *grpcServers) stop(timeout time.Duration) {
	var wg sync.WaitGroup
	for _, s := range []struct {
		srv *grpc.Server
		lis net.Listener
	}{{g.client, g.clientLis}, {g.peer, g.peerLis}, {g.pserver, g.pserverLis}} {
		switch {
		case s.srv != nil:
			wg.Add(1)
			go func() {
				defer wg.Done()
				stopped := make(chan struct{})
				go func() { s.srv.GracefulStop(); close(stopped) }()
				select {
				case <-stopped:
				case <-time.After(timeout):
					s.srv.Stop()
				}
			}()
		case s.lis != nil:
			s.lis.Close()
		}
	}
	wg.Wait()
}

// dataDirOf is where role agents keep their files.
func (n *Node) dataDirOf(sub string) string { return filepath.Join(n.cfg.DataDir, sub) }
