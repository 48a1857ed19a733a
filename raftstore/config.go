package raftstore

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftps/raftps/security"
)

// Config configures a Store. Build it with DefaultConfig and override fields;
// New clones it and never mutates it afterwards.
type Config struct {
	// ID is the Raft server ID of this node (required). It is written to
	// <DataDir>/raft/node-id on first start; a later start with another ID
	// fails with ErrDataDirMismatch.
	ID string
	// DataDir holds raft/raft.db or raft/wal (the log + stable store, see
	// LogStore), raft/snapshots, raft/node-id and raft/log-store (required).
	DataDir string
	// LogStore is the Raft log and stable store: LogStoreBoltDB
	// (raft-boltdb, the default, also for "") or LogStoreWAL
	// (hashicorp/raft-wal: one fdatasync per append instead of two). It is
	// recorded in raft/log-store at the data dir's first start; a later
	// start naming the other store fails with ErrLogStoreMismatch. A data
	// dir from before the record, holding raft.db, is boltdb.
	LogStore string
	// LogVerifyInterval, if positive, turns on Consul's log verification
	// (verify.go): the leader appends a checkpoint this often, and each
	// follower checks that its log store reads back what the leader wrote
	// since the previous one (Store.LogVerification). Default 0: off.
	LogVerifyInterval time.Duration
	// RaftAddr is the TCP bind address of the Raft transport, e.g. ":7001"
	// or "127.0.0.1:0" (required).
	RaftAddr string
	// AdvertiseAddr is the address other servers dial; empty means the
	// bound address (which must then be a routable IP, not 0.0.0.0).
	AdvertiseAddr string
	// Bootstrap forms a cluster if the data dir holds no Raft state: with
	// BootstrapServers if set, else a single-node cluster of this server.
	// With existing state it is ignored, so the same flags work on restart.
	Bootstrap bool
	// BootstrapServers is the optional initial configuration (bootstrap-expect).
	BootstrapServers []raft.Server
	// ForceNewCluster, with existing Raft state, makes this server a
	// cluster of one voter, itself, keeping everything in its log and
	// snapshots (etcd's --force-new-cluster): the recovery when a majority
	// is gone for good. See recover.go; remove it after one start.
	ForceNewCluster bool
	// Transport, if set, replaces the TCP transport (RaftAddr and
	// AdvertiseAddr are then ignored; Addr reports Transport.LocalAddr).
	// Tests use hashicorp/raft's InmemTransport to partition servers in
	// process (Disconnect/Connect); the store closes it at Close if it
	// implements raft.WithClose.
	Transport raft.Transport
	// TLS, if set, runs the TCP transport over mutual TLS (tls.go): peers
	// must present a certificate of the cluster CA with the node role.
	TLS *security.Material

	// HeartbeatTimeout (default 500 ms), ElectionTimeout (500 ms),
	// LeaderLeaseTimeout (500 ms) and CommitTimeout (50 ms) are hashicorp/raft's
	// timeouts, with LAN defaults: ~1.1 s from a leader SIGKILL to the next
	// committed write. They are what package node's defaults map to
	// (node.RaftTimeouts: etcd's --heartbeat-interval 50, --election-timeout
	// 500); LeaderLeaseTimeout is HeartbeatTimeout rather than Consul's half,
	// which under CPU load made leaders step down on their own (node/DESIGN.md,
	// "Raft timing").
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration
	// SnapshotThreshold is the number of log entries between snapshots
	// (default 8192); SnapshotInterval how often the threshold is checked
	// (default 30 s).
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration
	// TrailingLogs is the number of entries kept after a snapshot (default
	// 10240). A generous value lets a lagging follower catch up from the log
	// instead of an InstallSnapshot (see hashicorp/raft #697 in doc.go).
	TrailingLogs uint64
	// MaxBatch is the maximum number of commands coalesced into one Raft log
	// entry (default 256).
	MaxBatch int
	// MaxTxnOps is the most ops a txn may hold in each of its compares,
	// success and failure branches (etcd's --max-txn-ops; default
	// DefaultMaxTxnOps, 128). A larger txn is refused with fsm.ErrTooLarge
	// before it reaches the log.
	MaxTxnOps int
	// QuotaBackendBytes is the most bytes of keys and values the store
	// may hold (etcd's --quota-backend-bytes; default
	// DefaultQuotaBackendBytes, 2 GiB; negative: no quota). A write past
	// it is refused with fsm.ErrNoSpace (ResourceExhausted) and arms the
	// NOSPACE alarm (schema.NoSpaceAlarmKey).
	QuotaBackendBytes int64
	// Disk, if set, is asked before every write that appends to the log
	// (Apply, ApplyLocal, Join, Remove): while the data dir's file system
	// is below its reserve the write is refused at once with a
	// *DiskFullError (ResourceExhausted) instead of meeting ENOSPC in the
	// log, which costs the leader its leadership. Reads, watches and lease
	// keepalives pass. The store's own writes (expired-lease revocations,
	// the NOSPACE alarm) are not refused. The store does not close it.
	Disk *DiskGuard
	// MaxWatchers is the most watchers the store serves at once, of all
	// clients (default DefaultMaxWatchers, 20000); MaxWatchersPerConn the
	// most of one client connection (the gRPC peer address; default
	// DefaultMaxWatchersPerConn, 5000). Past either a watch is refused
	// with ErrTooManyWatchers (ResourceExhausted).
	MaxWatchers        int
	MaxWatchersPerConn int
	// MaxInflight is the number of entries the batcher keeps proposed but
	// not yet applied (default 1). While they are in flight new commands
	// queue and the next entry carries them all; on a 2-core box 1 gave
	// ~32 commands per entry at 64 writers and the best throughput, 4 gave
	// ~12 and 25% less.
	MaxInflight int
	// BatchLinger bounds how long the batcher holds a formed batch open
	// for the proposers the previous entry just answered (default 3 ms; a
	// negative value turns it off). It never waits for proposers that are
	// already back (one client in a loop never waits), and never longer
	// than the previous entry's propose-to-apply time. See runBatcher.
	BatchLinger time.Duration
	// TransferTimeout bounds each leadership-transfer attempt at Close
	// (default 2 x ElectionTimeout); Close makes at most 3 attempts.
	TransferTimeout time.Duration
	// Logger receives the store's and hashicorp/raft's logs (default slog.Default()).
	Logger *slog.Logger
}

// Defaults of the store's caps on clients (Config).
const (
	// DefaultMaxTxnOps is Config.MaxTxnOps's default (etcd's --max-txn-ops).
	DefaultMaxTxnOps = 128
	// DefaultQuotaBackendBytes is Config.QuotaBackendBytes's default
	// (etcd's DefaultQuotaBytes).
	DefaultQuotaBackendBytes = 2 << 30
	// DefaultMaxWatchers is Config.MaxWatchers's default.
	DefaultMaxWatchers = 20000
	// DefaultMaxWatchersPerConn is Config.MaxWatchersPerConn's default.
	DefaultMaxWatchersPerConn = 5000
)

// DefaultConfig returns a Config with the LAN defaults documented on the
// fields; ID, DataDir and RaftAddr still have to be set.
func DefaultConfig() Config {
	return Config{
		HeartbeatTimeout:   500 * time.Millisecond,
		ElectionTimeout:    500 * time.Millisecond,
		LeaderLeaseTimeout: 500 * time.Millisecond,
		CommitTimeout:      50 * time.Millisecond,
		SnapshotThreshold:  8192,
		SnapshotInterval:   30 * time.Second,
		TrailingLogs:       10240,
		MaxBatch:           256,
		MaxTxnOps:          DefaultMaxTxnOps,
		MaxWatchers:        DefaultMaxWatchers,
		QuotaBackendBytes:  DefaultQuotaBackendBytes,
		MaxWatchersPerConn: DefaultMaxWatchersPerConn,
		MaxInflight:        1,
		BatchLinger:        3 * time.Millisecond,
	}
}

// Validate reports the first invalid field; zero durations and sizes count
// as "use the default" and are valid.
func (c Config) Validate() error {
	var errs []error
	if c.ID == "" {
		errs = append(errs, errors.New("raftstore: config: ID is required"))
	}
	if c.DataDir == "" {
		errs = append(errs, errors.New("raftstore: config: DataDir is required"))
	}
	if c.RaftAddr == "" && c.Transport == nil {
		errs = append(errs, errors.New("raftstore: config: RaftAddr is required"))
	}
	if c.MaxTxnOps < 0 || c.MaxWatchers < 0 || c.MaxWatchersPerConn < 0 {
		errs = append(errs, fmt.Errorf("raftstore: config: MaxTxnOps %d, MaxWatchers %d or MaxWatchersPerConn %d < 0", c.MaxTxnOps, c.MaxWatchers, c.MaxWatchersPerConn))
	}
	if err := checkLogStore(c.LogStore); err != nil {
		errs = append(errs, fmt.Errorf("raftstore: config: LogStore: %w", err))
	}
	if c.MaxBatch < 0 || c.MaxInflight < 0 {
		errs = append(errs, fmt.Errorf("raftstore: config: MaxBatch %d or MaxInflight %d < 0", c.MaxBatch, c.MaxInflight))
	}
	d := c.withDefaults()
	if d.LeaderLeaseTimeout > d.HeartbeatTimeout {
		errs = append(errs, fmt.Errorf("raftstore: config: LeaderLeaseTimeout %v > HeartbeatTimeout %v", d.LeaderLeaseTimeout, d.HeartbeatTimeout))
	}
	if d.ElectionTimeout < d.HeartbeatTimeout {
		errs = append(errs, fmt.Errorf("raftstore: config: ElectionTimeout %v < HeartbeatTimeout %v", d.ElectionTimeout, d.HeartbeatTimeout))
	}
	if d.CommitTimeout <= 0 || d.HeartbeatTimeout < 5*time.Millisecond {
		errs = append(errs, errors.New("raftstore: config: timeouts too small"))
	}
	if c.Bootstrap && len(c.BootstrapServers) > 0 {
		found := false
		for _, s := range c.BootstrapServers {
			if string(s.ID) == c.ID {
				found = true
			}
		}
		if !found {
			errs = append(errs, fmt.Errorf("raftstore: config: BootstrapServers does not contain this server %q", c.ID))
		}
	}
	return errors.Join(errs...)
}

// withDefaults returns a copy with zero fields replaced by DefaultConfig's.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.HeartbeatTimeout == 0 {
		c.HeartbeatTimeout = d.HeartbeatTimeout
	}
	if c.ElectionTimeout == 0 {
		c.ElectionTimeout = d.ElectionTimeout
	}
	if c.LeaderLeaseTimeout == 0 {
		c.LeaderLeaseTimeout = d.LeaderLeaseTimeout
	}
	if c.CommitTimeout == 0 {
		c.CommitTimeout = d.CommitTimeout
	}
	if c.SnapshotThreshold == 0 {
		c.SnapshotThreshold = d.SnapshotThreshold
	}
	if c.SnapshotInterval == 0 {
		c.SnapshotInterval = d.SnapshotInterval
	}
	if c.TrailingLogs == 0 {
		c.TrailingLogs = d.TrailingLogs
	}
	if c.MaxTxnOps == 0 {
		c.MaxTxnOps = d.MaxTxnOps
	}
	if c.QuotaBackendBytes == 0 {
		c.QuotaBackendBytes = d.QuotaBackendBytes
	}
	if c.MaxWatchers == 0 {
		c.MaxWatchers = d.MaxWatchers
	}
	if c.MaxWatchersPerConn == 0 {
		c.MaxWatchersPerConn = d.MaxWatchersPerConn
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = d.MaxBatch
	}
	if c.MaxInflight == 0 {
		c.MaxInflight = d.MaxInflight
	}
	if c.LogStore == "" {
		c.LogStore = LogStoreBoltDB
	}
	if c.BatchLinger == 0 {
		c.BatchLinger = d.BatchLinger
	}
	if c.TransferTimeout == 0 {
		c.TransferTimeout = 2 * c.ElectionTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.BootstrapServers = append([]raft.Server(nil), c.BootstrapServers...)
	return c
}

// MinLeaseTTL is the smallest lease TTL in seconds the store grants:
// 1.5 x ElectionTimeout rounded up to whole seconds (1 s with the defaults).
// A lease must outlive the election that may interrupt its keepalives.
func (c Config) MinLeaseTTL() int64 {
	d := c.withDefaults()
	min := d.ElectionTimeout * 3 / 2
	s := int64((min + time.Second - 1) / time.Second)
	if s < 1 {
		s = 1
	}
	return s
}

// raftConfig maps c (with defaults applied) onto hashicorp/raft's config.
func (c Config) raftConfig(notify chan<- bool) *raft.Config {
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(c.ID)
	rc.HeartbeatTimeout = c.HeartbeatTimeout
	rc.ElectionTimeout = c.ElectionTimeout
	rc.LeaderLeaseTimeout = c.LeaderLeaseTimeout
	rc.CommitTimeout = c.CommitTimeout
	rc.SnapshotThreshold = c.SnapshotThreshold
	rc.SnapshotInterval = c.SnapshotInterval
	rc.TrailingLogs = c.TrailingLogs
	rc.NotifyCh = notify
	// BatchApplyCh stays false: a buffered applyCh lets every client write
	// become its own entry and defeats the store's coalescing.
	rc.BatchApplyCh = false
	rc.Logger = newHCLogger(c.Logger.With("component", "raft"), "raft")
	return rc
}
