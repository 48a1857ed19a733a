// Package etcdapi serves etcd's v3 gRPC API (go.etcd.io/etcd/api/v3
// etcdserverpb: KV, Watch, Lease, Cluster, Maintenance) on top of a
// raftstore.Store, next to raftps' own services on the node's client port,
// so etcdctl, etcd's Go client (go.etcd.io/etcd/client/v3 and its
// concurrency package) and programs written against them work against
// raftps unchanged:
//
//	srv := etcdapi.New(store, members) // members: gossip, for MemberList
//	srv.Register(grpcServer)
//
// It is a translation layer only: every call goes through the store's
// typed methods (Put, Txn, DeleteRange, Range, LeaseGrant, Watch, ...),
// the same ones raftps' own KV service (raftstore/service) uses, so both
// APIs see one keyspace, one revision sequence and the same validation.
// In particular raftps' own keys (/jobs/..., /nodes/..., schema) are
// visible to etcd clients, and an etcd client's write to them is the same
// command, checked the same way, as a write through raftps' API.
//
// # What is served, and how it maps
//
//   - KV.Range: key, range_end, limit, revision, sort_order/sort_target,
//     serializable, keys_only, count_only, min/max mod and create
//     revision, with etcd's rules (sorting or filtering reads the whole
//     range, then sorts, then applies the limit; count is the number of
//     keys in the range). A read at an old revision is rebuilt from the
//     current state and the watch history (fsm.Events): the store keeps
//     the history of its last fsm.HistoryRevisions revisions, so a
//     revision below that is "mvcc: required revision has been
//     compacted", as in an etcd that auto-compacts.
//   - KV.Put, DeleteRange, Txn (compares on value, version, create and mod
//     revision and lease; range ops in a Txn may sort and filter like
//     Range). etcd's duplicate-key rule for Txn is enforced.
//   - Watch: one bidirectional stream multiplexes watchers (create,
//     cancel, progress requests), with start_revision, prev_kv, the
//     NOPUT/NODELETE filters, progress_notify (every ProgressInterval) and
//     compaction reported as etcd does it: a created response, then one
//     with compact_revision set and canceled. A stream holds at most
//     Server.MaxWatchersPerStream watchers (1000), and the store caps
//     watchers per connection and per node; a create past a cap is
//     answered created and canceled with a reason naming the cap. All
//     watchers of a stream share one channel from the store and one
//     sending goroutine.
//   - Lease: grant, revoke, keep-alive stream (an unknown lease answers
//     TTL 0), time-to-live with keys (an unknown lease answers TTL -1),
//     leases list. TTLs below raftps' minimum are raised, like etcd's.
//   - Cluster.MemberList: the Raft configuration, voters as members and
//     non-voters as learners; names are raftps node ids, client URLs
//     http://<gRPC client address> from gossip, peer URLs
//     http://<Raft address>; https:// for both when the call came over
//     TLS (a raftps cluster serves every node with mutual TLS, or none).
//   - Maintenance: Status (version is Version, the etcd API version this
//     package follows, and raftps's own version is the response header
//     VersionHeader; db size is the bytes of the node's Raft log store and
//     snapshots), Alarm (GET lists the NOSPACE alarm, DEACTIVATE disarms
//     it), HashKV (CRC-32 over the key/value state at a revision),
//     Snapshot (EncodeSnapshot's file: a 16 KiB bolt database whose one
//     key reads "NOT AN ETCD SNAPSHOT: ... use `raftps snapshot
//     status|restore`", then raftps' FSM snapshot, the bytes raftps' Raft
//     snapshots hold, zero-padded to a multiple of 512 bytes with its
//     length at the end, then a SHA-256 over a raftps domain string and
//     all before, the shape etcdctl 3.4's `snapshot save` checks;
//     `etcdctl snapshot status` fails with that key's name and `etcdctl
//     snapshot restore` refuses it at its hash check (leaving
//     DIR/member/snap/db, which etcdctl writes first); ParseSnapshot
//     gives the FSM snapshot back for fsm.FSM.Restore).
//
// Everything else (Compact, RangeStream, member add/remove/update/promote,
// Defragment, MoveLeader, Downgrade, every method of Auth (raftps
// authorises by mutual TLS certificates, not etcd users), nested Txns, Compare with
// range_end, Put with ignore_value/ignore_lease, a revision inside a Txn)
// answers codes.Unimplemented with a message naming what to use instead,
// never a wrong answer. The client's "hasleader" metadata
// (clientv3.WithRequireLeader) is not checked: a watch on a node that lost
// its leader goes on serving what that node applies.
//
// # Ids
//
// etcd's member and cluster ids are 64-bit; raftps' are strings. MemberID
// maps one to the other (FNV-1a 64), so a node's etcd member id is stable
// across restarts and the same on every node.
//
// # Errors
//
// Errors leave as etcd's rpctypes statuses (ToStatus, the one table of the
// etcd direction): a missing lease is "etcdserver: requested lease not
// found" (NotFound), a compacted revision "etcdserver: mvcc: required
// revision has been compacted" (OutOfRange), no leader "etcdserver: no
// leader" (Unavailable), so etcd's client retries and maps them to its own
// error values (rpctypes.Error) exactly as against etcd. raftps errors with
// no etcd counterpart keep raftps' mapping (api/rpctypes.ToStatus).
//
// All methods are safe for concurrent use.
package etcdapi
