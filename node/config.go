package node

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/raftps/raftps/gossip"
	"github.com/raftps/raftps/master"
	"github.com/raftps/raftps/raftstore"
	"github.com/raftps/raftps/security"
)

// Config is the configuration of one node. Build it with DefaultConfig
// and override fields; New copies it.
type Config struct {
	// ID is the node's ID, unique in the cluster: its Raft server ID, its
	// gossip name and the prefix of its trainers' IDs (required).
	ID string
	// DataDir holds raft/ (log, snapshots, node-id, cluster-id) and
	// checkpoints/ (the checkpoint blob store) (required).
	DataDir string
	// RaftLogStore is the Raft log store, raftstore.LogStoreBoltDB (the
	// default) or raftstore.LogStoreWAL (hashicorp/raft-wal, as Consul's
	// raft_logstore backend "wal": one fdatasync per append, faster
	// writes at one client). Chosen at the data dir's first start and
	// recorded there; a restart naming the other store is refused
	// (raftstore.ErrLogStoreMismatch). To change it, migrate the node:
	// see the package doc.
	RaftLogStore string
	// RaftLogVerifyInterval, if positive, turns on the log stores'
	// verification across nodes (raftstore.Config.LogVerifyInterval,
	// Consul's raft-wal verifier): the leader appends a checkpoint this
	// often and each node checks that its log store reads back what the
	// leader wrote, logging an error if not. Default 0: off.
	RaftLogVerifyInterval time.Duration

	// GRPCAddr is the bind address of the gRPC client API (default
	// 127.0.0.1:7000): KV, Lease, Watch, Cluster, Master, CheckpointStore.
	GRPCAddr string
	// PeerAddr is the bind address of the node-to-node gRPC services
	// (Internal write forwarding, CheckpointStore); PServerAddr that of the
	// pserver data path (PServer). Empty (the default) binds an ephemeral
	// port on GRPCAddr's host: other nodes and trainers learn both from
	// gossip and slot records, never from flags.
	PeerAddr    string
	PServerAddr string
	// RaftAddr is the bind address of the Raft transport (default 127.0.0.1:7001).
	RaftAddr string
	// GossipAddr is the bind address of gossip, UDP and TCP (default 127.0.0.1:7002).
	GossipAddr string
	// HTTPAddr is the bind address of /healthz, /readyz and /metrics
	// (default 127.0.0.1:7003).
	HTTPAddr string
	// Advertise is the host other nodes use to reach this one (needed when
	// binding to 0.0.0.0); empty announces the bind addresses as they are.
	Advertise string

	// Join lists gossip addresses of existing members (may include this
	// node's own).
	Join []string
	// BootstrapExpect: with no existing state, wait for this many server
	// nodes in gossip and bootstrap them together (Consul's bootstrap_expect).
	// 0 or 1 with no Join bootstraps a single-node cluster (default 0).
	BootstrapExpect int
	// ForceNewCluster restarts a server as a new cluster of one voter,
	// itself, from its own data dir, keeping everything it had (etcd's
	// --force-new-cluster; raftstore.Config.ForceNewCluster): the recovery
	// when a majority is gone for good. New nodes then --join it. Remove
	// it after one start.
	ForceNewCluster bool
	// Roles are gossip.RoleServer, RolePServer and RoleTrainer (default:
	// all three). A node without RoleServer joins as a Raft non-voter and
	// must Join a cluster.
	Roles []string
	// DatasetDir, if set, replaces the jobs' dataset path for this node's
	// trainers.
	DatasetDir string
	// DatasetRoots are the directories a job's dataset.path may name
	// (absolute, or relative to a root), resolved without following a
	// link out of them (security.ConfinePath); the submit check and this
	// node's trainers refuse anything else with one error that does not
	// tell what exists. Default: <DataDir>/datasets (and DatasetDir if set).
	DatasetRoots []string
	// GossipKeyringFile is a keyring file (security.LoadKeyringFile: a JSON
	// array of base64 keys, the primary first) that encrypts gossip;
	// `raftps keyring` changes it on every member and each rewrites its
	// file. No secret on the command line. Required with TLS unless
	// InsecureGossip (Validate: ErrNoGossipKeyring).
	GossipKeyringFile string
	// InsecureGossip lets a TLS node run gossip without a keyring
	// (--insecure-gossip). UNSAFE: anyone who reaches the gossip port may
	// join memberlist and report members dead (the master then revokes
	// their leases, requeues their tasks and, after DeadServerTimeout,
	// removes dead voters). Raft membership still needs the node
	// certificate (raftstore.Store.VerifyPeer).
	InsecureGossip bool

	// TLS names the cluster CA and this node's certificate and key (PEM;
	// security.Files): with them every gRPC port, node-to-node dial and
	// the Raft transport run mutual TLS 1.3, each call is authorised by
	// the role of the caller's certificate (security.Authorizer), and the
	// files are reloaded when they change. Empty: plaintext (then
	// `raftps node` requires --insecure).
	TLS security.Files
	// HTTPTLS also serves the HTTP port (/metrics, health, dashboard) over
	// mutual TLS with the node's certificate: every client must present a
	// certificate of the cluster CA, and the dashboard authorises by its
	// role.
	HTTPTLS bool

	// HeartbeatInterval and ElectionTimeout are etcd's
	// --heartbeat-interval and --election-timeout: how often the leader
	// heartbeats each follower, and how long a follower hears nothing
	// before it stands for election (also how long a leader goes without
	// a quorum before it steps down). ElectionTimeout must be at least
	// 5 x HeartbeatInterval (etcd's rule) and at most 50 s. RaftTimeouts
	// maps them onto hashicorp/raft's three timeouts; doc.go ("Raft
	// timing") gives the mapping and the measurements behind the defaults
	// (DefaultHeartbeatInterval, DefaultElectionTimeout). 0 means the
	// default.
	HeartbeatInterval time.Duration
	ElectionTimeout   time.Duration
	// DeadServerTimeout: a server dead in gossip this long is removed from
	// the Raft configuration, never below quorum (default 30 s; 0 means
	// the master's default).
	DeadServerTimeout time.Duration
	// PServerLeaseTTL is the TTL of the lease under this node's pserver
	// slot claims (whole seconds, MinPServerLeaseTTL to MaxPServerLeaseTTL;
	// default 5 s). It bounds a slot's failover: a holder that cannot renew
	// fences itself 2/3 TTL after its last keepalive, and another node
	// serves the slot only once that fence has surely passed (DESIGN.md
	// §6). Shorter fails over faster and fences sooner under load.
	PServerLeaseTTL time.Duration
	// PServerFailoverTimeout is the detection timeout of replicated slots
	// (issue 34; --pserver-failover-timeout, default
	// master.DefaultFailoverTimeout, 300 ms; 10 ms to 1 min): a primary
	// reported suspect (a trainer's failed call, a broken replication
	// stream) is probed with this deadline and failed over if it does not
	// answer. Shorter fails over faster and more often by mistake under
	// load (a spurious failover costs a promotion, never a split brain).
	PServerFailoverTimeout time.Duration

	// DiskReserve is the free space (bytes) the data dir's file system
	// must keep: below it the node refuses writes with ResourceExhausted
	// naming the disk, /readyz and `raftps status` say why, and writes
	// resume by themselves once space is freed (default
	// raftstore.DefaultDiskReserve, 64 MiB).
	DiskReserve uint64

	// MaxTxnOps is the most ops a txn may hold in its compares and in each
	// branch, on raftps's and etcd's KV alike (etcd's --max-txn-ops;
	// default raftstore.DefaultMaxTxnOps, 128): a larger txn is refused
	// with InvalidArgument before it reaches the log. Every node of a
	// cluster should use the same value (the leader's gates the log).
	MaxTxnOps int

	// QuotaBackendBytes is the most bytes of keys and values the store may
	// hold (etcd's --quota-backend-bytes; default
	// raftstore.DefaultQuotaBackendBytes, 2 GiB; negative: none): a write
	// past it is refused with ResourceExhausted and arms the NOSPACE
	// alarm (schema.NoSpaceAlarmKey), which refuses every write that adds
	// keys or bytes until an admin frees space and deletes the key. The
	// leader's value applies.
	QuotaBackendBytes int64

	// KeepFinishedJobs and FinishedJobMaxAge are the retention of finished
	// (succeeded, failed, cancelled) jobs (master.Config): the leader
	// deletes the oldest beyond the newest KeepFinishedJobs and those
	// finished longer than FinishedJobMaxAge ago, with their keys. Zero:
	// no limit of that kind. Defaults: 1000 jobs, no age limit.
	KeepFinishedJobs  int32
	FinishedJobMaxAge time.Duration

	// PServerMemoryBudget is the bytes this node's pserver slots may hold
	// together (parameters and optimizer state); TrainerMemoryBudget the
	// bytes its trainers may hold together (each the dense model and its
	// gradients). Announced in gossip; jobs are admitted against them
	// (budget.go). Defaults: half and a quarter of the machine's memory
	// (also for 0).
	PServerMemoryBudget uint64
	TrainerMemoryBudget uint64

	// Zone is this node's failure domain (--zone: a rack, a room, an
	// availability zone; at most MaxZoneLen bytes), announced in gossip:
	// a replicated slot's backups go to nodes of other zones first
	// (pserver/DESIGN.md, "Replicated slots"). Empty: none.
	Zone string

	// Logger receives every component's logs (default slog.Default()).
	Logger *slog.Logger
}

// DefaultConfig returns the defaults documented on Config's fields; ID and
// DataDir still have to be set.
func DefaultConfig() Config {
	c := Config{
		GRPCAddr:               "127.0.0.1:7000",
		RaftAddr:               "127.0.0.1:7001",
		RaftLogStore:           raftstore.LogStoreBoltDB,
		GossipAddr:             "127.0.0.1:7002",
		HTTPAddr:               "127.0.0.1:7003",
		Roles:                  gossip.Roles(),
		HeartbeatInterval:      DefaultHeartbeatInterval,
		ElectionTimeout:        DefaultElectionTimeout,
		DeadServerTimeout:      30 * time.Second,
		PServerLeaseTTL:        5 * time.Second,
		PServerFailoverTimeout: master.DefaultFailoverTimeout,
		DiskReserve:            raftstore.DefaultDiskReserve,
		MaxTxnOps:              raftstore.DefaultMaxTxnOps,
		QuotaBackendBytes:      raftstore.DefaultQuotaBackendBytes,
		KeepFinishedJobs:       1000,
	}
	c.PServerMemoryBudget, c.TrainerMemoryBudget = defaultBudgets()
	return c
}

// ErrInvalidConfig is wrapped by every error of Config.Validate.
var ErrInvalidConfig = errors.New("invalid node configuration")

// ErrNoGossipKeyring: a node with mutual TLS was given no gossip keyring
// (GossipKeyringFile) and not InsecureGossip (issue 32, hole 3).
var ErrNoGossipKeyring = errors.New("no gossip keyring")

// Validate checks the configuration; its errors wrap ErrInvalidConfig and
// name the `raftps node` flag at fault.
// MaxZoneLen bounds --zone: it rides in every gossip message's metadata
// (gossip.MaxMetaSize).
const MaxZoneLen = 64

func (c *Config) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, a...))
	}
	if len(c.Zone) > MaxZoneLen {
		return bad("--zone %q: at most %d bytes", c.Zone, MaxZoneLen)
	}
	if c.ID == "" {
		return bad("--id is required")
	}
	if c.DataDir == "" {
		return bad("--data-dir is required")
	}
	if c.RaftLogStore != "" && !slices.Contains(raftstore.LogStores(), c.RaftLogStore) {
		return bad("--raft-log-store %q: want %s", c.RaftLogStore, strings.Join(raftstore.LogStores(), " or "))
	}
	if c.RaftLogVerifyInterval < 0 {
		return bad("--raft-log-verify-interval must be >= 0 (0: off)")
	}
	for _, r := range c.Roles {
		if !gossip.ValidRole(r) {
			return bad("--roles: unknown role %q (known: %s, %s, %s)", r, gossip.RoleServer, gossip.RolePServer, gossip.RoleTrainer)
		}
	}
	if !c.hasRole(gossip.RoleServer) && len(c.Join) == 0 {
		return bad("--roles: a node without the server role must --join a cluster (it replicates the metadata as a non-voter)")
	}
	if c.BootstrapExpect < 0 {
		return bad("--bootstrap-expect must be >= 0")
	}
	if err := c.TLS.Validate(); err != nil {
		return bad("--tls-ca-file, --tls-cert-file and --tls-key-file go together: %v", err)
	}
	if c.TLS.Enabled() && c.GossipKeyringFile == "" && !c.InsecureGossip {
		return fmt.Errorf("%w: %w: with mutual TLS, gossip needs --gossip-keyring-file, or anyone who reaches the gossip port can report members dead; "+
			"make one with `echo \"[\\\"$(raftps keyring generate)\\\"]\" > gossip.keyring` (`raftps tls ca create` writes one beside the CA), copy it to every node (mode 0600), "+
			"or give --insecure-gossip to run unauthenticated gossip (unsafe)", ErrInvalidConfig, ErrNoGossipKeyring)
	}
	if c.InsecureGossip && c.GossipKeyringFile != "" {
		return bad("--insecure-gossip with --gossip-keyring-file: give one or the other")
	}
	if c.HTTPTLS && !c.TLS.Enabled() {
		return bad("--http-tls needs --tls-ca-file, --tls-cert-file and --tls-key-file")
	}
	if c.MaxTxnOps < 0 {
		return bad("--max-txn-ops must be >= 0 (0: the default, %d)", raftstore.DefaultMaxTxnOps)
	}
	if c.KeepFinishedJobs < 0 {
		return bad("--keep-finished-jobs must be >= 0 (0: no count limit)")
	}
	if c.FinishedJobMaxAge < 0 {
		return bad("--finished-job-max-age must be >= 0 (0: no age limit)")
	}
	if err := validRaftTiming(c.HeartbeatInterval, c.ElectionTimeout); err != nil {
		return bad("%v", err)
	}
	if t := c.PServerLeaseTTL; t != 0 && (t%time.Second != 0 || t < MinPServerLeaseTTL || t > MaxPServerLeaseTTL) {
		return bad("--pserver-lease-ttl %v: want whole seconds from %v to %v", t, MinPServerLeaseTTL, MaxPServerLeaseTTL)
	}
	if t := c.PServerFailoverTimeout; t != 0 && (t < MinPServerFailoverTimeout || t > MaxPServerFailoverTimeout) {
		return bad("--pserver-failover-timeout %v: want %v to %v", t, MinPServerFailoverTimeout, MaxPServerFailoverTimeout)
	}
	return nil
}

// Bounds of Config.PServerLeaseTTL: below 2 s a loaded node's keepalives
// (every 300 ms) would miss its fence; above an hour a dead node's slots
// would stand still for as long.
const (
	MinPServerLeaseTTL = 2 * time.Second
	MaxPServerLeaseTTL = time.Hour
	// Bounds of Config.PServerFailoverTimeout: below 10 ms a probe over
	// TLS fails on a loaded node; above a minute gossip detects first.
	MinPServerFailoverTimeout = 10 * time.Millisecond
	MaxPServerFailoverTimeout = time.Minute
)

func (c *Config) hasRole(r string) bool { return gossip.HasRole(c.Roles, r) }
