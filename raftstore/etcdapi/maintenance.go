package etcdapi

import (
	"bytes"
	"context"
	"encoding/binary"
	"hash/crc32"

	"github.com/hashicorp/raft"
	etcdpb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/internal/version"
	"github.com/raftps/raftps/schema"
)

// snapshotChunk is the blob size of one Snapshot response (etcd's).
const snapshotChunk = 32 << 10

type maintenanceServer struct {
	etcdpb.UnimplementedMaintenanceServer
	s *Server
}

// Status reports this node's Raft state in etcd's terms: Version is the
// etcd API version this package follows (Version; raftps's own version is
// the response header VersionHeader), DbSize and
// DbSizeInUse the bytes of this node's Raft data on disk (its log store
// and snapshots: what `raftps endpoint status` reports as db_size; they
// were 0).
// With no known leader, Errors holds "etcdserver: no leader", as etcd's
// does.
func (m maintenanceServer) Status(ctx context.Context, _ *etcdpb.StatusRequest) (*etcdpb.StatusResponse, error) {
	// raftps's own version travels beside etcd's answer, in the response
	// header (etcd's StatusResponse has no field for it; `raftps endpoint
	// status` shows it).
	_ = grpc.SetHeader(ctx, metadata.Pairs(VersionHeader, version.Get().Version))
	st := m.s.store.Stats()
	out := &etcdpb.StatusResponse{Header: m.s.header(st.Revision), Version: Version, Leader: MemberID(st.LeaderID),
		RaftIndex: st.CommitIndex, RaftTerm: st.Term, RaftAppliedIndex: st.AppliedIndex}
	if servers, err := m.s.store.Configuration(); err == nil {
		for _, srv := range servers {
			if string(srv.ID) == st.ID {
				out.IsLearner = srv.Suffrage != raft.Voter
			}
		}
	}
	if d, ok := m.s.store.(interface{ DBSize() int64 }); ok {
		// raftps's store is the Raft log and snapshots (raftps endpoint status's
		// db_size); all of it is in use.
		out.DbSize = d.DBSize()
		out.DbSizeInUse = out.DbSize
	}
	if st.LeaderID == "" {
		out.Errors = append(out.Errors, rpctypes.ErrGRPCNoLeader.Error())
	}
	return out, nil
}

// Alarm serves raftps's one alarm, NOSPACE (the backend quota;
// schema.NoSpaceAlarmKey): GET lists it while its key exists (etcdctl
// alarm list), DEACTIVATE of NOSPACE deletes the key (etcdctl alarm
// disarm; free space first, or the next write past the quota arms it
// again). Activating alarms, and other alarms, are not served.
func (m maintenanceServer) Alarm(ctx context.Context, r *etcdpb.AlarmRequest) (*etcdpb.AlarmResponse, error) {
	key := []byte(schema.NoSpaceAlarmKey)
	switch {
	case r.Action == etcdpb.AlarmRequest_GET:
	case r.Action == etcdpb.AlarmRequest_DEACTIVATE && (r.Alarm == etcdpb.AlarmType_NOSPACE || r.Alarm == etcdpb.AlarmType_NONE):
		if _, err := m.s.store.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: key}); err != nil {
			return nil, ToStatus(ctx, err)
		}
	default:
		return nil, ToStatus(ctx, unimplemented("alarm %v %v: raftps raises only NOSPACE, by its backend quota, and serves only its list and disarm", r.Action, r.Alarm))
	}
	resp := &etcdpb.AlarmResponse{Header: m.s.header(0)}
	rr, err := m.s.store.Range(ctx, &pb.RangeRequest{Key: key, CountOnly: true})
	if err != nil {
		return nil, ToStatus(ctx, err)
	}
	if rr.Count > 0 {
		resp.Alarms = []*etcdpb.AlarmMember{{MemberID: MemberID(m.s.store.Stats().ID), Alarm: etcdpb.AlarmType_NOSPACE}}
	}
	return resp, nil
}

// HashKV hashes the key/value state at r.Revision (0: the current one):
// CRC-32 (Castagnoli) over every key in key order with its value,
// create and mod revision, version and lease. Two nodes at the same
// revision give the same hash. It is not etcd's hash (which covers its
// MVCC history), so compare it only between raftps nodes.
func (m maintenanceServer) HashKV(ctx context.Context, r *etcdpb.HashKVRequest) (*etcdpb.HashKVResponse, error) {
	all := &etcdpb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, Revision: r.Revision}
	resp, err := m.s.rangeKV(ctx, all)
	if err != nil {
		return nil, ToStatus(ctx, err)
	}
	h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	var buf []byte
	for _, kv := range resp.Kvs {
		buf = binary.AppendUvarint(buf[:0], uint64(len(kv.Key)))
		buf = append(buf, kv.Key...)
		buf = binary.AppendUvarint(buf, uint64(len(kv.Value)))
		buf = append(buf, kv.Value...)
		for _, v := range []int64{kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease} {
			buf = binary.AppendVarint(buf, v)
		}
		_, _ = h.Write(buf)
	}
	rev := r.Revision
	if rev == 0 {
		rev = resp.Header.Revision
	}
	return &etcdpb.HashKVResponse{Header: m.s.header(resp.Header.Revision), Hash: h.Sum32(),
		CompactRevision: m.s.store.FSM().CompactRevision(), HashRevision: rev}, nil
}

// Snapshot streams this node's FSM snapshot (the bytes raftps' Raft
// snapshots hold: keys, leases, watch history, jobs) in 32 KiB blobs, as
// a snapshot file (EncodeSnapshot): a small bolt database whose one key
// tells etcdctl's user to use `raftps snapshot status|restore`, the FSM
// snapshot, padding to a multiple of 512 bytes, its length and a
// checksum. It is raftps' format: ParseSnapshot gives back the FSM
// snapshot (fsm.FSM.Restore reads it); `etcdctl snapshot save` writes it,
// `etcdctl snapshot status/restore` refuse it.
func (m maintenanceServer) Snapshot(_ *etcdpb.SnapshotRequest, stream etcdpb.Maintenance_SnapshotServer) error {
	ctx := stream.Context()
	snap, err := m.s.store.FSM().Snapshot()
	if err != nil {
		return ToStatus(ctx, err)
	}
	defer snap.Release()
	sink := &bufferSink{}
	if err := snap.Persist(sink); err != nil {
		return ToStatus(ctx, err)
	}
	data := EncodeSnapshot(sink.Bytes())
	hdr := m.s.header(0)
	for len(data) > 0 {
		n := min(len(data), snapshotChunk)
		resp := &etcdpb.SnapshotResponse{Header: hdr, RemainingBytes: uint64(len(data) - n), Blob: data[:n], Version: Version}
		if err := stream.Send(resp); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

// bufferSink is a raft.SnapshotSink in memory.
type bufferSink struct{ bytes.Buffer }

func (*bufferSink) ID() string    { return "etcdapi" }
func (*bufferSink) Cancel() error { return nil }
func (*bufferSink) Close() error  { return nil }

var _ raft.SnapshotSink = (*bufferSink)(nil)

// Hash is not served (etcd deprecated it); HashKV is.
func (maintenanceServer) Hash(ctx context.Context, _ *etcdpb.HashRequest) (*etcdpb.HashResponse, error) {
	return nil, ToStatus(ctx, unimplemented("Hash; use HashKV"))
}

// Defragment is not served: raftps has no bolt database to defragment.
func (maintenanceServer) Defragment(ctx context.Context, _ *etcdpb.DefragmentRequest) (*etcdpb.DefragmentResponse, error) {
	return nil, ToStatus(ctx, unimplemented("Defragment: raftps keeps its keyspace in memory and Raft snapshots; there is no database file to defragment"))
}

// MoveLeader is not served.
func (maintenanceServer) MoveLeader(ctx context.Context, _ *etcdpb.MoveLeaderRequest) (*etcdpb.MoveLeaderResponse, error) {
	return nil, ToStatus(ctx, unimplemented("MoveLeader: stopping the leader node (SIGTERM) hands leadership over"))
}

// Downgrade is not served: raftps has one storage format per release.
func (maintenanceServer) Downgrade(ctx context.Context, _ *etcdpb.DowngradeRequest) (*etcdpb.DowngradeResponse, error) {
	return nil, ToStatus(ctx, unimplemented("Downgrade: raftps has no cluster version to lower; run the older raftps binary on every node"))
}
