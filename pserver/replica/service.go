package replica

import (
	"context"
	"errors"
	"io"
	"sync"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/api/rpctypes"
	"github.com/raftps/raftps/pserver/wire"
)

// Service serves the Replica gRPC service for the backups a node holds
// (register it with pb.RegisterReplicaServer). Safe for concurrent use.
type Service struct {
	pb.UnimplementedReplicaServer

	// OnBroken, if set (before serving), is called in its own goroutine
	// with the slot of a stream that ended without its primary closing it
	// (its connection broke or was cancelled: the primary may be dead)
	// while this node still backs the slot up; the node reports the
	// primary to the master (master.Suspects), which probes it.
	OnBroken func(job string, slot int32)

	mu        sync.RWMutex
	backups   map[slotID]*Backup
	installer Installer
}

type slotID struct {
	job  string
	slot int32
}

// NewService returns a Service holding no backups.
func NewService() *Service { return &Service{backups: map[slotID]*Backup{}} }

// Add serves b as the backup of (job, b.Slot().Index()), replacing any.
func (s *Service) Add(job string, b *Backup) {
	s.mu.Lock()
	s.backups[slotID{job, b.Slot().Index()}] = b
	s.mu.Unlock()
}

// Remove stops serving the backup of (job, slot) (promoted or dropped).
func (s *Service) Remove(job string, slot int32) {
	s.mu.Lock()
	delete(s.backups, slotID{job, slot})
	s.mu.Unlock()
}

func (s *Service) backup(job string, slot int32) *Backup {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.backups[slotID{job, slot}]
}

// Replicate applies each request of the stream with Backup.Replicate and
// sends each ack as its request is applied: a request whose turn it is
// (or a duplicate) in the receiving goroutine, one that must wait for an
// earlier seq in its own (at most MaxPending at once, so a request
// waiting never blocks the receipt of the seq it waits for). The first
// error ends the stream with that error's status (ErrWrongSlot for a
// slot this node does not back up).
func (s *Service) Replicate(stream pb.Replica_ReplicateServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	var (
		mu     sync.Mutex // guards closed and wg.Add
		closed bool
		wg     sync.WaitGroup
		sendMu sync.Mutex // guards stream.Send and ended
		ended  bool       // the handler returned: no more Send
		once   sync.Once
		first  error
	)
	fail := func(err error) { once.Do(func() { first = err; cancel() }) }
	// apply applies req, returns its gradient buffers to the data pool
	// (the tensor codec read them into it; the slot keeps no reference),
	// and sends its ack.
	apply := func(b *Backup, req *pb.ReplicateRequest) error {
		ack, err := b.Replicate(ctx, req)
		wire.ReleaseTensors(req.GetGrads())
		if err != nil {
			return err
		}
		sendMu.Lock()
		defer sendMu.Unlock()
		if ended { // (the receiving goroutine, applying in line, may outlive the handler)
			return context.Canceled
		}
		return stream.Send(ack)
	}
	sem := make(chan struct{}, MaxPending)
	recvDone := make(chan struct{})
	go func() {
		defer close(recvDone)
		var last *pb.ReplicateRequest
		for {
			req, err := stream.Recv()
			if err != nil {
				if !errors.Is(err, io.EOF) && ctx.Err() == nil {
					fail(err)
				}
				if !errors.Is(err, io.EOF) && stream.Context().Err() != nil {
					s.broken(last)
				}
				return
			}
			last = req
			b := s.backup(req.GetJob(), req.GetSlot())
			if b == nil {
				wire.ReleaseTensors(req.GetGrads())
				fail(errorf(ErrWrongSlot, "this node holds no backup of job %q slot %d", req.GetJob(), req.GetSlot()))
				return
			}
			if req.GetSeq() <= b.Applied()+1 {
				// Its turn (or a duplicate): Backup.Replicate cannot wait
				// (the applied seq only grows), so it runs here, without a
				// goroutine to start and wake: the common case, the
				// primary's stream in seq order.
				if err := apply(b, req); err != nil {
					fail(err)
					return
				}
				continue
			}
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			mu.Lock()
			if closed {
				mu.Unlock()
				return
			}
			wg.Add(1)
			mu.Unlock()
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				if err := apply(b, req); err != nil {
					fail(err)
				}
			}()
		}
	}()
	select {
	case <-recvDone: // the primary closed its side (or the stream broke)
	case <-ctx.Done():
	}
	mu.Lock()
	closed = true
	mu.Unlock()
	wg.Wait()
	sendMu.Lock()
	ended = true
	sendMu.Unlock()
	once.Do(func() {}) // a later fail (the receiving goroutine's) is not read
	return first
}

// broken calls OnBroken for the slot of req, the last request of a
// stream that broke, if this node still backs it up.
func (s *Service) broken(req *pb.ReplicateRequest) {
	if s.OnBroken == nil || req == nil || s.backup(req.GetJob(), req.GetSlot()) == nil {
		return
	}
	go s.OnBroken(req.GetJob(), req.GetSlot())
}

// Stream is a Peer over one Replicate stream of a backup: requests are
// sent in the caller's order, acks are matched by seq. Safe for
// concurrent use. Once the stream fails, every call fails with its error
// (status codes as the backup's; ErrStaleEpoch and the other sentinels
// are recognized again, for BackupError.Deposed); open a new Stream.
type Stream struct {
	stream pb.Replica_ReplicateClient
	sendMu sync.Mutex

	mu      sync.Mutex
	applied int64
	epoch   int64
	err     error
	changed chan struct{}
}

// NewStream opens a Replicate stream on c; ctx bounds its life. Requests
// go with the tensor codec (wire.TensorCallOption): gradients are sent
// from their buffers, not marshalled into another, and a backup served
// with wire.ServerOptions reads them from the frames into its data pool;
// a request's gradients must not change until its Replicate returns.
func NewStream(ctx context.Context, c pb.ReplicaClient) (*Stream, error) {
	st, err := c.Replicate(ctx, wire.TensorCallOption)
	if err != nil {
		return nil, err
	}
	s := &Stream{stream: st, changed: make(chan struct{})}
	go s.recv()
	return s, nil
}

func (s *Stream) recv() {
	for {
		ack, err := s.stream.Recv()
		s.mu.Lock()
		if err != nil {
			s.err = rpctypes.FromStatus(err)
		} else {
			s.applied, s.epoch = max(s.applied, ack.GetApplied()), max(s.epoch, ack.GetEpoch())
		}
		close(s.changed)
		s.changed = make(chan struct{})
		s.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// Replicate sends req and waits for an ack covering req.seq.
func (s *Stream) Replicate(ctx context.Context, req *pb.ReplicateRequest) (*pb.ReplicateAck, error) {
	return s.Wait(ctx, req.GetSeq(), s.Send(req))
}

// Send sends req without waiting for its ack (requests are sent in the
// order of the calls): a learner's pipeline (re-replication) sends many,
// then Waits for the last.
func (s *Stream) Send(req *pb.ReplicateRequest) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	return s.stream.Send(req)
}

// Wait waits until the backup acknowledged seq (applied >= seq), or the
// stream fails, or ctx ends; err is Send's, if any (an io.EOF from Send
// waits for the stream's own error).
func (s *Stream) Wait(ctx context.Context, seq int64, err error) (*pb.ReplicateAck, error) {
	req := &pb.ReplicateRequest{Seq: seq}
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if s.applied >= req.GetSeq() {
			return &pb.ReplicateAck{Epoch: s.epoch, Applied: s.applied}, nil
		}
		if s.err != nil {
			return nil, s.err
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, err // (io.EOF from Send: the stream's error comes from Recv)
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		s.mu.Lock()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
}

// Close ends the sending side of the stream.
func (s *Stream) Close() error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	return s.stream.CloseSend()
}
