package security

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strings"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/schema"
)

// A Rule is one row of the RPC table: who may call a method, and a
// trainer's limits on it.
type Rule struct {
	// Roles are the roles besides node that may call the method (node
	// may call every method; none: an internal API).
	Roles []string
	// Limits says, for the documentation, what limits a role beyond the
	// table's role check (checked by the trainer check, the services or
	// the store; "" none).
	Limits string
	// trainer, if set, checks each request message of a trainer and
	// returns why it is refused ("" allowed).
	trainer func(Identity, any) string
	// filter, if set, trims a trainer's unary answer in place.
	filter func(Identity, any)
}

func (r Rule) allows(role string) bool { return slices.Contains(r.Roles, role) }

// forTrainer returns the rule's per-request check and answer filter for
// id (nil for every role but trainer).
func (r Rule) forTrainer(id Identity) (check func(Identity, any) string, filter func(Identity, any)) {
	if id.Role != RoleTrainer {
		return nil, nil
	}
	return r.trainer, r.filter
}

// The rows' shapes.
var (
	// internalRPC: node only.
	internalRPC = Rule{}
	// adminRPC: writes and costly reads; admin (and node).
	adminRPC = Rule{Roles: []string{RoleAdmin}}
	// readRPC: reads of every job, for operators; no trainer.
	readRPC = Rule{Roles: []string{RoleAdmin, RoleReader}}
	// clusterRead: reads of the cluster (members, status), for every role.
	clusterRead = Rule{Roles: []string{RoleAdmin, RoleTrainer, RoleReader}}
)

// trainerRead is a read every role may make, a trainer within check.
func trainerRead(limits string, check func(Identity, any) string) Rule {
	return Rule{Roles: []string{RoleAdmin, RoleTrainer, RoleReader}, Limits: limits, trainer: check}
}

// trainerWrite is a write of admin and, within check, trainer.
func trainerWrite(limits string, check func(Identity, any) string) Rule {
	return Rule{Roles: []string{RoleAdmin, RoleTrainer}, Limits: limits, trainer: check}
}

// Limits of a trainer, as the table's Limits column says them.
const (
	limitJob       = "trainer: jobs its certificate names"
	limitAsTrainer = "trainer: jobs its certificate names; trainer field = its certificate's name"
	limitKeys      = "trainer: keys under /jobs/<its job>/ or outside /jobs/"
	limitOwnKey    = "trainer: writes only /jobs/<its job>/trainers/<its name> and single keys under /torch/store/<its job>/; reads as Range"
	limitLease     = "trainer, reader (TimeToLive): leases its certificate granted; node, admin: any"
)

// rpcs is the RPC table: every method registered on the node's client,
// node-to-node and pserver gRPC servers (TestRPCTableCoversServers in
// node/ walks them). Count and size limits that apply to every role (txn
// ops, value size, watchers, message sizes) are the store's and the
// servers' (node/DESIGN.md, "Resource limits").
var rpcs = map[string]Rule{
	// raftps KV.
	pb.KV_Range_FullMethodName:       trainerRead(limitKeys, checkKeyRead),
	pb.KV_Put_FullMethodName:         trainerWrite(limitOwnKey, checkKVWrite),
	pb.KV_DeleteRange_FullMethodName: trainerWrite(limitOwnKey, checkKVWrite),
	pb.KV_Txn_FullMethodName:         trainerWrite(limitOwnKey, checkKVWrite),
	pb.Watch_Watch_FullMethodName:    trainerRead(limitKeys, checkKeyRead),

	// raftps Lease: the owner is checked by the service (CheckLease).
	pb.Lease_LeaseGrant_FullMethodName:      trainerWrite(fmt.Sprintf("trainer: TTL <= %d s, at most %d leases held", TrainerMaxLeaseTTL, TrainerMaxLeases), checkLeaseGrant),
	pb.Lease_LeaseRevoke_FullMethodName:     trainerWrite(limitLease, checkLeaseID),
	pb.Lease_LeaseKeepAlive_FullMethodName:  trainerWrite(limitLease, checkLeaseID),
	pb.Lease_LeaseTimeToLive_FullMethodName: trainerRead(limitLease, checkLeaseID),

	pb.Cluster_Members_FullMethodName:       clusterRead,
	pb.Cluster_Status_FullMethodName:        clusterRead,
	pb.Cluster_MemberAdd_FullMethodName:     adminRPC,
	pb.Cluster_MemberPromote_FullMethodName: adminRPC,
	pb.Cluster_MemberRemove_FullMethodName:  adminRPC,

	pb.Master_SubmitJob_FullMethodName:    adminRPC,
	pb.Master_CancelJob_FullMethodName:    adminRPC,
	pb.Master_DeleteJob_FullMethodName:    adminRPC,
	pb.Master_GetJob_FullMethodName:       trainerRead(limitJob, checkJobName),
	pb.Master_WatchJob_FullMethodName:     trainerRead(limitJob, checkJobName),
	pb.Master_ListJobs_FullMethodName:     {Roles: clusterRead.Roles, Limits: "trainer: answer lists its jobs only", trainer: checkIs[*pb.ListJobsRequest], filter: filterJobs},
	pb.Master_GetTask_FullMethodName:      trainerWrite(limitAsTrainer, checkAsTrainer),
	pb.Master_TaskFinished_FullMethodName: trainerWrite(limitAsTrainer, checkAsTrainer),
	pb.Master_TaskFailed_FullMethodName:   trainerWrite(limitAsTrainer, checkAsTrainer),
	// A trainer reports a slot's primary its call could not reach; the
	// master probes it before it acts, at most once per failover timeout
	// per slot (master.Suspects): a report cannot fail over a primary
	// that answers.
	pb.Master_ReportSuspect_FullMethodName: trainerWrite(limitAsTrainer, checkAsTrainer),

	// The pserver port is the training data path: trainers (and admin);
	// a reader reads parameters from checkpoints.
	pb.PServer_Pull_FullMethodName:       trainerWrite(limitJob, checkAsTrainer),
	pb.PServer_PullStream_FullMethodName: trainerWrite(limitJob, checkAsTrainer),
	pb.PServer_Push_FullMethodName:       trainerWrite(limitAsTrainer, checkAsTrainer),
	pb.PServer_PushStream_FullMethodName: trainerWrite(limitAsTrainer, checkAsTrainer),
	pb.PServer_LeaveStep_FullMethodName:  trainerWrite(limitAsTrainer, checkAsTrainer),
	// A slot's primary streams its updates to its backups (pserver/replica):
	// node to node only, on the pserver port (its message sizes).
	pb.Replica_Replicate_FullMethodName: internalRPC,
	pb.Replica_Install_FullMethodName:   internalRPC,

	// Checkpoints: blobs are named by content (md5), not by job, so a
	// trainer reads its parameters from its pservers (Pull), not here.
	pb.CheckpointStore_GetBlob_FullMethodName:     readRPC,
	pb.CheckpointStore_GetManifest_FullMethodName: readRPC,
	// VerifyBlob re-hashes a blob (O(blob) per call; the dashboard's
	// verify, O(checkpoint)): an operator's check, admin only.
	pb.CheckpointStore_VerifyBlob_FullMethodName: {Roles: adminRPC.Roles, Limits: "O(blob) per call: admin only"},
	// Replica deletion is the checkpoint manager's (node) and the CLI's
	// (admin); blobs are written node to node only.
	pb.CheckpointStore_DeleteVersions_FullMethodName: adminRPC,
	pb.CheckpointStore_PutBlob_FullMethodName:        internalRPC,

	pb.Keyring_ListKeys_FullMethodName:   adminRPC,
	pb.Keyring_InstallKey_FullMethodName: adminRPC,
	pb.Keyring_UseKey_FullMethodName:     adminRPC,
	pb.Keyring_RemoveKey_FullMethodName:  adminRPC,

	pb.Internal_ForwardApply_FullMethodName:       internalRPC,
	pb.Internal_ForwardApplyBatch_FullMethodName:  internalRPC,
	pb.Internal_ForwardStream_FullMethodName:      internalRPC,
	pb.Internal_ReadIndex_FullMethodName:          internalRPC,
	pb.Internal_LeaseKeepAliveOnce_FullMethodName: internalRPC,
	pb.Internal_LeaseTimeToLive_FullMethodName:    internalRPC,
	pb.Internal_RaftProgress_FullMethodName:       internalRPC,

	// etcd's v3 API: reads for readers, the rest admin; a trainer uses
	// raftps's API, whose requests the table can scope to its jobs.
	"/etcdserverpb.KV/Range":               readRPC,
	"/etcdserverpb.KV/RangeStream":         readRPC,
	"/etcdserverpb.KV/Put":                 adminRPC,
	"/etcdserverpb.KV/DeleteRange":         adminRPC,
	"/etcdserverpb.KV/Txn":                 adminRPC,
	"/etcdserverpb.KV/Compact":             adminRPC,
	"/etcdserverpb.Watch/Watch":            readRPC,
	"/etcdserverpb.Lease/LeaseGrant":       adminRPC,
	"/etcdserverpb.Lease/LeaseRevoke":      adminRPC,
	"/etcdserverpb.Lease/LeaseKeepAlive":   adminRPC,
	"/etcdserverpb.Lease/LeaseTimeToLive":  readRPC,
	"/etcdserverpb.Lease/LeaseLeases":      readRPC,
	"/etcdserverpb.Cluster/MemberList":     readRPC,
	"/etcdserverpb.Cluster/MemberAdd":      adminRPC,
	"/etcdserverpb.Cluster/MemberRemove":   adminRPC,
	"/etcdserverpb.Cluster/MemberUpdate":   adminRPC,
	"/etcdserverpb.Cluster/MemberPromote":  adminRPC,
	"/etcdserverpb.Maintenance/Status":     readRPC,
	"/etcdserverpb.Maintenance/Alarm":      adminRPC,
	"/etcdserverpb.Maintenance/Defragment": adminRPC,
	"/etcdserverpb.Maintenance/MoveLeader": adminRPC,
	"/etcdserverpb.Maintenance/Downgrade":  adminRPC,
	"/etcdserverpb.Maintenance/Snapshot":   adminRPC,
	// Hash and HashKV walk the whole store (O(keys + history)) on every
	// call: an admin's consistency check, not a reader's poll.
	"/etcdserverpb.Maintenance/Hash":          {Roles: adminRPC.Roles, Limits: "O(store) per call: admin only"},
	"/etcdserverpb.Maintenance/HashKV":        {Roles: adminRPC.Roles, Limits: "O(store) per call: admin only"},
	"/etcdserverpb.Auth/AuthStatus":           readRPC,
	"/etcdserverpb.Auth/AuthEnable":           adminRPC,
	"/etcdserverpb.Auth/AuthDisable":          adminRPC,
	"/etcdserverpb.Auth/Authenticate":         adminRPC,
	"/etcdserverpb.Auth/UserAdd":              adminRPC,
	"/etcdserverpb.Auth/UserGet":              adminRPC,
	"/etcdserverpb.Auth/UserList":             adminRPC,
	"/etcdserverpb.Auth/UserDelete":           adminRPC,
	"/etcdserverpb.Auth/UserChangePassword":   adminRPC,
	"/etcdserverpb.Auth/UserGrantRole":        adminRPC,
	"/etcdserverpb.Auth/UserRevokeRole":       adminRPC,
	"/etcdserverpb.Auth/RoleAdd":              adminRPC,
	"/etcdserverpb.Auth/RoleGet":              adminRPC,
	"/etcdserverpb.Auth/RoleList":             adminRPC,
	"/etcdserverpb.Auth/RoleDelete":           adminRPC,
	"/etcdserverpb.Auth/RoleGrantPermission":  adminRPC,
	"/etcdserverpb.Auth/RoleRevokePermission": adminRPC,
}

// RPCTable returns a copy of the RPC table: method -> Rule.
func RPCTable() map[string]Rule { return maps.Clone(rpcs) }

// checkIs allows a trainer any request of type T (the method's request).
func checkIs[T any](_ Identity, req any) string {
	if _, ok := req.(T); ok {
		return ""
	}
	return notTrainers(req)
}

func notTrainers(req any) string { return fmt.Sprintf("request %T is not allowed to a trainer", req) }

func notItsJob(id Identity, job string) string {
	return fmt.Sprintf("job %q is not one of the certificate's jobs %v", job, id.Jobs)
}

// checkJobName: a job read (GetJob, WatchJob) names one of its jobs.
func checkJobName(id Identity, req any) string {
	r, ok := req.(interface{ GetName() string })
	if !ok {
		return notTrainers(req)
	}
	if !id.HasJob(r.GetName()) {
		return notItsJob(id, r.GetName())
	}
	return ""
}

// checkAsTrainer: a task or pserver request names one of its jobs and,
// where it names a trainer, exactly the certificate's name.
func checkAsTrainer(id Identity, req any) string {
	r, ok := req.(interface{ GetJob() string })
	if !ok {
		return notTrainers(req)
	}
	if !id.HasJob(r.GetJob()) {
		return notItsJob(id, r.GetJob())
	}
	if t, ok := req.(interface{ GetTrainer() string }); ok && t.GetTrainer() != id.Name {
		return fmt.Sprintf("trainer %q is not the certificate's name %q", t.GetTrainer(), id.Name)
	}
	return ""
}

// filterJobs trims a ListJobs answer to the trainer's jobs.
func filterJobs(id Identity, resp any) {
	if r, ok := resp.(*pb.ListJobsResponse); ok {
		r.Jobs = slices.DeleteFunc(r.Jobs, func(j *pb.JobStatus) bool { return !id.HasJob(j.GetName()) })
	}
}

// checkLeaseGrant bounds a trainer's lease TTL (the count is the FSM's:
// LeaseOwnerLimit).
func checkLeaseGrant(_ Identity, req any) string {
	r, ok := req.(*pb.LeaseGrantRequest)
	if !ok {
		return notTrainers(req)
	}
	if r.GetTtl() > TrainerMaxLeaseTTL {
		return fmt.Sprintf("lease TTL %d s is above a trainer's limit of %d s", r.GetTtl(), TrainerMaxLeaseTTL)
	}
	return ""
}

// checkLeaseID lets a lease request through to the service, which checks
// the lease's owner (CheckLease).
func checkLeaseID(_ Identity, req any) string {
	switch req.(type) {
	case *pb.LeaseRevokeRequest, *pb.LeaseKeepAliveRequest, *pb.LeaseTimeToLiveRequest:
		return ""
	}
	return notTrainers(req)
}

// checkKeyRead: a Range or Watch reads keys under /jobs/<its job>/ or
// outside /jobs/ only.
func checkKeyRead(id Identity, req any) string {
	switch r := req.(type) {
	case *pb.RangeRequest:
		return keyRead(id, r.GetKey(), r.GetRangeEnd())
	case *pb.WatchRequest:
		return keyRead(id, r.GetKey(), r.GetRangeEnd())
	}
	return notTrainers(req)
}

// keyRead allows [key, end) (end empty: key alone; "\x00": every key from
// key) if it lies within /jobs/<job>/ of one of the identity's jobs (a
// name its certificate names or matches, HasJob), or does not meet /jobs/
// at all.
func keyRead(id Identity, key, end []byte) string {
	jobsKey, jobsEnd := schema.PrefixRange(schema.JobsPrefix)
	if !meets(key, end, jobsKey, jobsEnd) {
		return ""
	}
	// The job the range starts in: the range must lie within its prefix.
	if rest, in := strings.CutPrefix(string(key), schema.JobsPrefix); in {
		if j, _, ok := strings.Cut(rest, "/"); ok && id.HasJob(j) {
			lo, hi := schema.PrefixRange(schema.JobPrefix(j))
			if inside(key, end, lo, hi) {
				return ""
			}
		}
	}
	what := fmt.Sprintf("key %q", key)
	if len(end) > 0 {
		what = fmt.Sprintf("keys [%q, %q)", key, end)
	}
	return fmt.Sprintf("%s outside %s<job>/ of its jobs %v", what, schema.JobsPrefix, id.Jobs)
}

// upper is the exclusive end of [key, end) as etcd reads it; nil: no end.
func upper(key, end []byte) []byte {
	switch {
	case len(end) == 0:
		return append(slices.Clip(key), 0)
	case len(end) == 1 && end[0] == 0:
		return nil
	}
	return end
}

// meets reports whether [key, end) and [lo, hi) share a key.
func meets(key, end, lo, hi []byte) bool {
	u := upper(key, end)
	return bytes.Compare(key, hi) < 0 && (u == nil || bytes.Compare(lo, u) < 0)
}

// inside reports whether [key, end) lies inside [lo, hi).
func inside(key, end, lo, hi []byte) bool {
	u := upper(key, end)
	return bytes.Compare(lo, key) <= 0 && u != nil && bytes.Compare(u, hi) <= 0
}

// checkKVWrite: a trainer writes only its registration keys; a txn's
// ranges and compares are reads (keyRead).
func checkKVWrite(id Identity, req any) string {
	switch r := req.(type) {
	case *pb.PutRequest:
		return trainerKey(id, r.GetKey(), nil)
	case *pb.DeleteRangeRequest:
		return trainerKey(id, r.GetKey(), r.GetRangeEnd())
	case *pb.TxnRequest:
		for _, c := range r.GetCompare() {
			if why := keyRead(id, c.GetKey(), nil); why != "" {
				return why
			}
		}
		for _, ops := range [][]*pb.RequestOp{r.GetSuccess(), r.GetFailure()} {
			for _, op := range ops {
				if why := txnOp(id, op); why != "" {
					return why
				}
			}
		}
		return ""
	}
	return notTrainers(req)
}

func txnOp(id Identity, op *pb.RequestOp) string {
	if p := op.GetRequestPut(); p != nil {
		return trainerKey(id, p.GetKey(), nil)
	}
	if d := op.GetRequestDeleteRange(); d != nil {
		return trainerKey(id, d.GetKey(), d.GetRangeEnd())
	}
	if g := op.GetRequestRange(); g != nil {
		return keyRead(id, g.GetKey(), g.GetRangeEnd())
	}
	return ""
}

// TorchStorePrefix is the root of the keys of raftps.torch.Store (the
// Python c10d store, python/raftps/torch/store.py): a job's store lives
// under TorchStorePrefix + <job> + "/", where the trainers of the job
// rendezvous and form their Gloo groups (issue 35).
const TorchStorePrefix = "/torch/store/"

// trainerKey allows the single key /jobs/<job>/trainers/<name> of one of
// the identity's jobs, <name> exactly its certificate's name, and any
// single key of one of its jobs' torch stores (TorchStorePrefix).
func trainerKey(id Identity, key, end []byte) string {
	if len(end) > 0 {
		return "a trainer may delete single keys only (no range)"
	}
	job, kind, tid, ok := schema.ParseJobKey(string(key))
	if ok && kind == schema.KindTrainer && id.HasJob(job) && tid == id.Name {
		return ""
	}
	if rest, ok := bytes.CutPrefix(key, []byte(TorchStorePrefix)); ok {
		if job, k, ok := bytes.Cut(rest, []byte("/")); ok && len(k) > 0 && id.HasJob(string(job)) {
			return ""
		}
	}
	return fmt.Sprintf("key %q is neither its registration key (%s%s) nor under %s<job>/ of its jobs %v",
		key, schema.TrainerPrefix("<job>"), id.Name, TorchStorePrefix, id.Jobs)
}
