package pserver

import (
	"context"
	"errors"
	"io"
	"sync"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver/wire"
)

type slotID struct {
	job  string
	slot int32
}

// Server implements pb.PServerServer for every (job, slot) hosted on a node.
// A request for a (job, slot) not hosted, or whose Slot is fenced or past
// its Deadline (checked by the Slot on entry and again before the reply),
// fails with gRPC Unavailable so the client re-resolves the slot's owner.
type Server struct {
	pb.UnimplementedPServerServer

	mu    sync.RWMutex
	slots map[slotID]*Slot
}

var _ pb.PServerServer = (*Server)(nil)

// NewServer returns a Server hosting no slot.
func NewServer() *Server { return &Server{slots: map[slotID]*Slot{}} }

// Host serves s as slot `slot` of job, replacing (and fencing) any previous one.
func (srv *Server) Host(job string, slot int32, s *Slot) {
	srv.mu.Lock()
	old := srv.slots[slotID{job, slot}]
	srv.slots[slotID{job, slot}] = s
	srv.mu.Unlock()
	if old != nil && old != s {
		old.Fence()
	}
}

// Unhost stops serving (job, slot) and fences its Slot; it returns the Slot
// (nil if none) so the caller can take a last snapshot.
func (srv *Server) Unhost(job string, slot int32) *Slot {
	srv.mu.Lock()
	s := srv.slots[slotID{job, slot}]
	delete(srv.slots, slotID{job, slot})
	srv.mu.Unlock()
	if s != nil {
		s.Fence()
	}
	return s
}

// Slot returns the hosted slot.
func (srv *Server) Slot(job string, slot int32) (*Slot, bool) {
	srv.mu.RLock()
	defer srv.mu.RUnlock()
	s, ok := srv.slots[slotID{job, slot}]
	return s, ok
}

func (srv *Server) lookup(job string, slot int32) (*Slot, error) {
	s, ok := srv.Slot(job, slot)
	if !ok {
		return nil, wire.Errorf(wire.ErrNotHosted, "job %q slot %d", job, slot)
	}
	return s, nil
}

// Pull implements pb.PServerServer.
func (srv *Server) Pull(ctx context.Context, req *pb.PullRequest) (*pb.PullResponse, error) {
	s, err := srv.lookup(req.GetJob(), req.GetSlot())
	if err != nil {
		return nil, err
	}
	resp, buf, err := s.pull(ctx, req)
	if err == nil {
		wire.LendReply(ctx, resp, buf)
	}
	return resp, wire.ToGRPC(err)
}

// Push implements pb.PServerServer.
func (srv *Server) Push(ctx context.Context, req *pb.PushRequest) (*pb.PushResponse, error) {
	s, err := srv.lookup(req.GetJob(), req.GetSlot())
	if err != nil {
		return nil, err
	}
	resp, buf, err := s.pushReply(ctx, req)
	// The slot keeps no reference to the gradient bytes after Push returns
	// (async applies them; a sync push waits until its step has used them,
	// or folds them into the step's sums before it stops waiting).
	wire.ReleaseTensors(req.Grads)
	if err == nil {
		wire.LendReply(ctx, resp, buf)
	}
	return resp, wire.ToGRPC(err)
}

// LeaveStep implements pb.PServerServer.
func (srv *Server) LeaveStep(ctx context.Context, req *pb.LeaveStepRequest) (*pb.LeaveStepResponse, error) {
	s, err := srv.lookup(req.GetJob(), req.GetSlot())
	if err != nil {
		return nil, err
	}
	if err := s.checkFence(); err != nil {
		return nil, err
	}
	if n := len(req.GetTrainer()); n == 0 || n > MaxTrainerIDLen {
		return nil, wire.Errorf(wire.ErrInvalid, "leave step: trainer id of %d bytes, want 1 to %d", n, MaxTrainerIDLen)
	}
	s.LeaveStep(req.GetTrainer())
	return &pb.LeaveStepResponse{}, nil
}

// PullStream answers each PullRequest with one or more PullResponses of at
// most StreamChunkBytes of tensor data each (split between blocks), in
// order; the stream ends after the client closes its side.
func (srv *Server) PullStream(stream pb.PServer_PullStreamServer) error {
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		// The tensor codec sends resp's data in place, after Send returns:
		// every pull allocates its own copy (no buffer reuse).
		s, err := srv.lookup(req.GetJob(), req.GetSlot())
		if err != nil {
			return err
		}
		resp, err := s.Pull(stream.Context(), req)
		if err != nil {
			return wire.ToGRPC(err)
		}
		for _, chunk := range wire.ChunkTensors(resp.Tensors, wire.StreamChunkBytes) {
			if err := stream.Send(&pb.PullResponse{Version: resp.Version, Incarnation: resp.Incarnation, Tensors: chunk}); err != nil {
				return err
			}
		}
	}
}

// PushStream receives one logical push in several PushRequests (the first
// names job, slot, trainer, version, step, examples and push id; later ones
// carry only grads, or repeat the same job and slot) until the client closes
// its side, then applies it whole, as Push does, and sends one
// PushResponse. Every message is validated on arrival (job and slot hosted,
// tensors as in Push, no block or row twice across messages, total bytes at
// most what the slot can take), so a bad stream ends at its first bad
// message instead of being buffered whole.
func (srv *Server) PushStream(stream pb.PServer_PushStreamServer) error {
	var (
		req  *pb.PushRequest
		s    *Slot
		pp   *pushParser
		held [][]*pb.Tensor // every message's grads, released at the end
	)
	defer func() {
		for _, ts := range held {
			wire.ReleaseTensors(ts)
		}
	}()
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		held = append(held, m.Grads)
		if req == nil {
			req = m
			if s, err = srv.lookup(m.GetJob(), m.GetSlot()); err != nil {
				return err
			}
			pp = s.newPushParser()
		} else if (m.GetJob() != "" && m.GetJob() != req.GetJob()) || (m.GetSlot() != 0 && m.GetSlot() != req.GetSlot()) {
			return wire.ToGRPC(wire.Errorf(wire.ErrInvalid, "push stream: message for job %q slot %d in a stream for job %q slot %d", m.GetJob(), m.GetSlot(), req.GetJob(), req.GetSlot()))
		}
		if err := s.checkFence(); err != nil {
			return wire.ToGRPC(err)
		}
		if err := pp.add(m.GetGrads()); err != nil {
			return wire.ToGRPC(err)
		}
	}
	if req == nil {
		return wire.ToGRPC(wire.Errorf(wire.ErrInvalid, "empty push stream"))
	}
	resp, err := s.push(stream.Context(), req, pp.items)
	if err != nil {
		return wire.ToGRPC(err)
	}
	return stream.Send(resp)
}
