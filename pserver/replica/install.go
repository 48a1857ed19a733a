package replica

import (
	"context"
	"errors"
	"io"
	"slices"

	"github.com/raftps/raftps/api/errs"
	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/api/rpctypes"
	"google.golang.org/protobuf/proto"
)

// Re-replication (pserver/DESIGN.md, "Re-replication"): a primary builds
// a new backup by sending its slot's copy-on-write snapshot on the
// Replica service's Install stream (Install, client side; Service.Install,
// server side, which hands the blobs to the node's Installer), then the
// updates after the snapshot's version on a Replicate stream. The new
// backup is in no in-sync set until the primary's epoch-compared join
// commits: its acks count for nothing before.

// InstallChunkSize bounds the data of one InstallChunk (as PullStream's
// chunks).
const InstallChunkSize = 4 << 20

// Installer builds the backup of an Install stream from its header and
// vshard blobs (the node's agent: it knows the job's spec and its memory
// budget). Its errors end the stream with their status.
type Installer func(hdr *pb.InstallHeader, blobs map[int32][]byte) (*Backup, error)

// SetInstaller makes the service accept Install streams, building their
// backups with f (nil: Install is refused, ErrWrongSlot).
func (s *Service) SetInstaller(f Installer) {
	s.mu.Lock()
	s.installer = f
	s.mu.Unlock()
}

// Install receives a slot's snapshot from its primary, builds the backup
// with the Installer and serves it (Add), then answers with the backup's
// epoch and applied seq. Errors: ErrInvalid (no header first, or the blobs
// not the size the header announced), ErrWrongSlot (no Installer), the
// Installer's.
func (s *Service) Install(stream pb.Replica_InstallServer) error {
	s.mu.RLock()
	inst := s.installer
	s.mu.RUnlock()
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	hdr := first.GetHeader()
	if hdr == nil || hdr.GetJob() == "" || hdr.GetBytes() < 0 {
		return errorf(errs.ErrInvalid, "install: the first chunk must carry a header naming the job")
	}
	if inst == nil {
		return errorf(ErrWrongSlot, "install of job %q slot %d: this node builds no backups", hdr.GetJob(), hdr.GetSlot())
	}
	blobs := map[int32][]byte{}
	for v, n := range hdr.GetVshardBytes() {
		if n < 0 || n > hdr.GetBytes() {
			return errorf(errs.ErrInvalid, "install of job %q slot %d: vshard %d of %d bytes, %d in all", hdr.GetJob(), hdr.GetSlot(), v, n, hdr.GetBytes())
		}
		blobs[v] = make([]byte, 0, n)
	}
	var total int64
	for {
		c, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		total += int64(len(c.GetData()))
		if c.GetHeader() != nil || total > hdr.GetBytes() {
			return errorf(errs.ErrInvalid, "install of job %q slot %d: a second header, or more than the %d bytes announced", hdr.GetJob(), hdr.GetSlot(), hdr.GetBytes())
		}
		blobs[c.GetVshard()] = append(blobs[c.GetVshard()], c.GetData()...)
	}
	if total != hdr.GetBytes() {
		return errorf(errs.ErrInvalid, "install of job %q slot %d: %d bytes received, %d announced", hdr.GetJob(), hdr.GetSlot(), total, hdr.GetBytes())
	}
	b, err := inst(hdr, blobs)
	if err != nil {
		return err
	}
	s.Add(hdr.GetJob(), b)
	return stream.SendAndClose(&pb.InstallResponse{Epoch: b.Epoch(), Applied: b.Applied()})
}

// Install sends a slot's state to c's node on one Install stream: hdr
// (its bytes and vshard_bytes set here), then each vshard blob in vshard order in chunks
// of at most InstallChunkSize. It returns the new backup's answer, or the
// stream's error (statuses mapped back to the sentinels).
func Install(ctx context.Context, c pb.ReplicaClient, hdr *pb.InstallHeader, blobs map[int32][]byte) (*pb.InstallResponse, error) {
	vs := make([]int32, 0, len(blobs))
	sizes := make(map[int32]int64, len(blobs))
	var total int64
	for v, b := range blobs {
		vs = append(vs, v)
		sizes[v] = int64(len(b))
		total += int64(len(b))
	}
	slices.Sort(vs)
	st, err := c.Install(ctx)
	if err != nil {
		return nil, mapErr(err)
	}
	send := func(ch *pb.InstallChunk) error {
		if err := st.Send(ch); err != nil {
			_, rerr := st.CloseAndRecv() // the server's status, if it ended the stream
			if rerr != nil {
				return rerr
			}
			return err
		}
		return nil
	}
	h := proto.CloneOf(hdr)
	h.Bytes, h.VshardBytes = total, sizes
	if err := send(&pb.InstallChunk{Header: h}); err != nil {
		return nil, mapErr(err)
	}
	for _, v := range vs {
		b := blobs[v]
		for off := 0; off < len(b); off += InstallChunkSize {
			if err := send(&pb.InstallChunk{Vshard: v, Data: b[off:min(off+InstallChunkSize, len(b))]}); err != nil {
				return nil, mapErr(err)
			}
		}
	}
	resp, err := st.CloseAndRecv()
	return resp, mapErr(err)
}

// mapErr maps a gRPC status back to the sentinels (nil stays nil).
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	return rpctypes.FromStatus(err)
}
