package main

import (
	"github.com/spf13/cobra"

	"github.com/raftps/raftps/gossip"
	"github.com/raftps/raftps/node"
)

func newNodeCmd(g *globals) *cobra.Command {
	var (
		cfg        = node.DefaultConfig()
		logLevel   string
		configFile string
		reserve    uint64
		insecure   bool
		gcHeap     = defaultGCThreshold(node.MachineMemory())
	)
	c := &cobra.Command{
		Use:   "node",
		Short: "run a raftps node",
		Long: `Run a raftps node. The same command line works on first start, on restart
with an existing data dir, and for a node added to a running cluster:

  raftps node --id n1 --data-dir /var/lib/raftps --join 10.0.0.2:7002,10.0.0.3:7002 --bootstrap-expect 3 \
    --tls-ca-file ca.pem --tls-cert-file n1.pem --tls-key-file n1-key.pem

A node is secure by default (CockroachDB's rule): without --tls-* material it
refuses to start unless --insecure is given (see raftps tls --help), and a TLS
node refuses to start without --gossip-keyring-file (raftps tls ca create writes
gossip.keyring beside the CA) unless --insecure-gossip is given (unsafe).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if configFile != "" {
				if err := applyConfigFile(cmd.Flags(), configFile); err != nil {
					return err
				}
			}
			if err := tlsFlagsFromEnv(cmd.Flags()); err != nil {
				return err
			}
			logger, err := newLogger(g.err, logLevel)
			if err != nil {
				return err
			}
			cfg.Logger = logger
			cfg.DiskReserve = reserve << 20
			tuneGC(gcHeap, logger)
			if err := checkInsecure(cfg, insecure, logger); err != nil {
				return err
			}
			n, err := node.New(cfg)
			if err != nil {
				return err
			}
			return n.Run(cmd.Context())
		},
	}
	f := c.Flags()
	f.StringVar(&configFile, "config-file", "", "YAML file of flag values (keys are flag names: id, data-dir, join, ...); flags given on the command line win")
	f.BoolVar(&cfg.ForceNewCluster, "force-new-cluster", false, "start this server as a new cluster of one voter from its own data dir (when a majority is gone for good); remove it after one start")
	f.StringVar(&cfg.ID, "id", "", "node id, unique in the cluster (required)")
	f.StringVar(&cfg.DataDir, "data-dir", "", "data directory (required)")
	f.DurationVar(&cfg.RaftLogVerifyInterval, "raft-log-verify-interval", 0, "append a log-verification checkpoint this often: each node checks that its Raft log store reads back what the leader wrote and logs an error if not (0: off)")
	f.StringVar(&cfg.RaftLogStore, "raft-log-store", cfg.RaftLogStore, "Raft log store: boltdb or wal (hashicorp/raft-wal, one fdatasync per append); chosen at the data dir's first start, a restart naming the other is refused (to change it: remove the node, wipe its data dir, rejoin)")
	f.StringVar(&cfg.GRPCAddr, "grpc-addr", cfg.GRPCAddr, "gRPC client API address")
	f.StringVar(&cfg.PeerAddr, "peer-addr", "", "node-to-node gRPC address (default: an ephemeral port on the --grpc-addr host; announced in gossip)")
	f.StringVar(&cfg.PServerAddr, "pserver-addr", "", "pserver data path gRPC address (default: an ephemeral port on the --grpc-addr host; announced in slot records)")
	f.StringVar(&cfg.RaftAddr, "raft-addr", cfg.RaftAddr, "Raft transport address")
	f.StringVar(&cfg.GossipAddr, "gossip-addr", cfg.GossipAddr, "gossip address (UDP and TCP)")
	f.StringVar(&cfg.HTTPAddr, "http-addr", cfg.HTTPAddr, "HTTP address (/healthz, /readyz, /metrics)")
	f.StringVar(&cfg.Advertise, "advertise", "", "host other nodes use to reach this one (when binding to 0.0.0.0)")
	f.StringSliceVar(&cfg.Join, "join", nil, "gossip addresses of existing members (host:port,...)")
	f.IntVar(&cfg.BootstrapExpect, "bootstrap-expect", 0, "bootstrap once this many server nodes have joined")
	f.StringSliceVar(&cfg.Roles, "roles", cfg.Roles, "roles: "+gossip.RoleServer+", "+gossip.RolePServer+", "+gossip.RoleTrainer)
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn, error")
	f.StringSliceVar(&cfg.DatasetRoots, "dataset-root", nil, "directories a job's dataset.path may name (repeatable; default <data-dir>/datasets and --dataset-dir)")
	f.StringVar(&cfg.DatasetDir, "dataset-dir", "", "dataset directory of this node's trainers (default: the job's dataset path)")
	f.Var(millis{&cfg.HeartbeatInterval}, "heartbeat-interval", "time (ms) between the Raft leader's heartbeats to each follower (etcd's flag; see node.RaftTimeouts for how it maps onto hashicorp/raft)")
	f.Var(millis{&cfg.ElectionTimeout}, "election-timeout", "time (ms) a follower hears no leader before it stands for election, and a leader no quorum before it steps down (etcd's flag); at least 5 x --heartbeat-interval, at most 50000")
	f.Uint64Var(&reserve, "disk-reserve-mib", cfg.DiskReserve>>20, "free space (MiB) the data dir's disk must keep; below it writes are refused with ResourceExhausted")
	f.IntVar(&cfg.MaxTxnOps, "max-txn-ops", cfg.MaxTxnOps, "most ops a txn may hold in its compares and in each branch (raftps's and etcd's KV); larger txns are refused with InvalidArgument before the log")
	f.Int64Var(&cfg.QuotaBackendBytes, "quota-backend-bytes", cfg.QuotaBackendBytes, "most bytes of keys and values the store may hold; past it writes are refused with ResourceExhausted and the NOSPACE alarm (key /alarms/nospace) is armed until an admin frees space and deletes it (negative: no quota)")
	f.StringVar(&cfg.GossipKeyringFile, "gossip-keyring-file", "", "gossip encryption keyring: a JSON array of base64 keys, the primary first (raftps keyring rotates it)")
	f.BoolVar(&cfg.InsecureGossip, "insecure-gossip", false, "UNSAFE: run a TLS node's gossip without --gossip-keyring-file; anyone who reaches the gossip port may then join it and report members dead")
	f.StringVar(&cfg.TLS.CA, "tls-ca-file", "", "cluster CA certificate (PEM): with --tls-cert-file and --tls-key-file, mutual TLS on every port and dial")
	f.StringVar(&cfg.TLS.Cert, "tls-cert-file", "", "this node's certificate (PEM; made with raftps tls cert create --node), reloaded when it changes")
	f.StringVar(&cfg.TLS.Key, "tls-key-file", "", "this node's key (PEM)")
	f.BoolVar(&insecure, "insecure", false, "run without TLS and without authorisation: any process that reaches a port may do anything (for a throw-away local cluster only)")
	f.BoolVar(&cfg.HTTPTLS, "http-tls", false, "serve the HTTP port (dashboard, /metrics, /healthz, /readyz) over mutual TLS too: every client needs a certificate of the cluster CA, and the dashboard's cancel and delete need the admin role")
	f.Int32Var(&cfg.KeepFinishedJobs, "keep-finished-jobs", cfg.KeepFinishedJobs, "finished jobs kept (the oldest beyond are deleted with their keys; 0: no count limit)")
	f.StringVar(&cfg.Zone, "zone", "", "this node's failure domain (a rack, a room, an availability zone; at most 64 bytes): a replicated pserver slot's backups go to nodes of other zones first")
	f.Var(byteSize{&cfg.PServerMemoryBudget}, "pserver-memory-budget", "bytes this node's pserver slots may hold together (512MiB, 8GiB; default half the machine's memory); jobs are admitted against it")
	f.Var(byteSize{&cfg.TrainerMemoryBudget}, "trainer-memory-budget", "bytes this node's trainers may hold together, each the model and its gradients (default a quarter of the machine's memory); jobs are admitted against it")
	f.Var(byteSize{&gcHeap}, "gc-heap-threshold", "heap size (bytes) up to which the Go GC runs less often than GOGC=100 would (GOGC tuned between 100 and 500 after each cycle; default 512MiB, at most an eighth of the machine's memory); an explicit GOGC in the environment turns the tuning off")
	f.DurationVar(&cfg.FinishedJobMaxAge, "finished-job-max-age", 0, "delete finished jobs (and their keys) this long after they finished (0: no age limit)")
	f.DurationVar(&cfg.DeadServerTimeout, "dead-server-timeout", cfg.DeadServerTimeout, "remove a failed server from Raft after this long (never below quorum)")
	f.DurationVar(&cfg.PServerLeaseTTL, "pserver-lease-ttl", cfg.PServerLeaseTTL, "TTL of the lease under this node's pserver slots (whole seconds, 2s to 1h): a dead node's slots are served elsewhere about 2/3 of it after its last keepalive")
	f.DurationVar(&cfg.PServerFailoverTimeout, "pserver-failover-timeout", cfg.PServerFailoverTimeout, "detection timeout of replicated slots: a primary a trainer or a backup reports unreachable is probed with this deadline and its backup promoted if it does not answer (10ms to 1m; shorter fails over faster, and more often by mistake under load)")
	envUsage(f, nodeEnvFlags...)
	return c
}
