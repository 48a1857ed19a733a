package etcdapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/hashicorp/raft"
	etcdpb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/schema"
)

// snapshotChunk is the blob size of one Snapshot response (etcd's).
const snapshotChunk = 32 << 10

type maintenanceServer struct {
	etcdpb.UnimplementedMaintenanceServer
	s *Server
}

// Status reports this node's Raft state in etcd's terms. With no known
// leader, Errors holds "etcdserver: no leader", as etcd's does.
func (m maintenanceServer) Status(ctx context.Context, _ *etcdpb.StatusRequest) (*etcdpb.StatusResponse, error) {
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
// snapshots hold: keys, leases, watch history, jobs) in 32 KiB blobs,
// laid out as etcd's clients expect a snapshot stream (a body whose size
// is a multiple of 512, then its SHA-256; etcdctl 3.4 checks the size):
//
//	FSM snapshot | zero padding | length of the FSM snapshot (uint64, big endian) | SHA-256 of all before
//
// It is raftps' format, not a bolt database: ParseSnapshot gives back the
// FSM snapshot (fsm.FSM.Restore reads it); `etcdctl snapshot
// status/restore` cannot.
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
	n := sink.Len()
	body := (n + 8 + snapshotAlign - 1) / snapshotAlign * snapshotAlign
	data := make([]byte, body, body+sha256.Size)
	copy(data, sink.Bytes())
	binary.BigEndian.PutUint64(data[body-8:], uint64(n))
	sum := sha256.Sum256(data)
	data = append(data, sum[:]...)
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

// snapshotAlign is the multiple of the snapshot body's size (a bolt page).
const snapshotAlign = 512

// ErrBadSnapshot: a file is not a snapshot written by Snapshot (wrong
// size, checksum or length).
var ErrBadSnapshot = errors.New("etcdapi: not a raftps snapshot")

// ParseSnapshot checks a snapshot saved from Maintenance.Snapshot (by
// `etcdctl snapshot save`) and returns the FSM snapshot inside it.
// Errors: ErrBadSnapshot.
func ParseSnapshot(b []byte) ([]byte, error) {
	if len(b) < snapshotAlign+sha256.Size || (len(b)-sha256.Size)%snapshotAlign != 0 {
		return nil, fmt.Errorf("%w: size %d", ErrBadSnapshot, len(b))
	}
	body := b[:len(b)-sha256.Size]
	if sum := sha256.Sum256(body); !bytes.Equal(sum[:], b[len(body):]) {
		return nil, fmt.Errorf("%w: SHA-256 mismatch", ErrBadSnapshot)
	}
	n := binary.BigEndian.Uint64(body[len(body)-8:])
	if n > uint64(len(body)-8) {
		return nil, fmt.Errorf("%w: length %d in a body of %d bytes", ErrBadSnapshot, n, len(body))
	}
	return body[:n], nil
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
