package psclient

import (
	"context"
	"errors"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/api/rpctypes"
	"github.com/raftps/raftps/pserver/wire"
)

// SuspectReporter is told of a slot's pserver that failed a call at the
// transport (Transport): connection refused, Unavailable without a slot
// sentinel, a deadline. The trainer's reporter sends it to the master
// (Master.ReportSuspect), which probes the primary before it promotes a
// backup (pserver/DESIGN.md, "Replicated slots", "Detection"). addr is
// the address the call went to; err the call's error. It returns true if
// the slot moved (the master promoted a backup, or addr is not the
// primary any more): the Client's retry of the slot then stops its
// backoff wait and starts again from the first backoff, so it finds the
// promoted node within a few short waits instead of after a long one.
type SuspectReporter func(ctx context.Context, slot int32, addr string, err error) (moved bool)

// WithSuspectReporter makes the Client report every slot whose call
// failed at the transport to r, in the background (one report in flight
// per slot: the calls' retries go on meanwhile; each report gets
// ReportTimeout).
func WithSuspectReporter(r SuspectReporter) ClientOption {
	return func(c *clientConfig) { c.reporter = r }
}

// ReportTimeout bounds one report to the SuspectReporter.
const ReportTimeout = 5 * time.Second

// Transport reports whether err, a pserver call's error, is a failure to
// reach the server (Unavailable naming no slot sentinel: the connection
// was refused or broke; DeadlineExceeded: no answer in time), rather than
// an answer of the server (every other code, and Unavailable with
// ErrNotHosted or ErrFenced: the server is up, the slot moved).
func Transport(err error) bool {
	if err == nil {
		return false
	}
	err = rpctypes.FromStatus(err)
	switch status.Code(err) {
	case codes.DeadlineExceeded:
		return true
	case codes.Unavailable:
		return !errors.Is(err, wire.ErrNotHosted) && !errors.Is(err, wire.ErrFenced)
	}
	return errors.Is(err, context.DeadlineExceeded)
}

// ProbeParam is the parameter name a Probe pulls: no job has it, so a
// slot that is served answers ErrInvalid (InvalidArgument) at once,
// without reading its parameters.
const ProbeParam = "\x00probe"

// Probe asks cc, a pserver endpoint, for (job, slot) with a pull of
// ProbeParam, within ctx's deadline: nil if the server answered (any
// answer: InvalidArgument for a served slot, ErrNotHosted, ErrFenced),
// the call's error if it failed at the transport (Transport). The
// master's confirmation of a suspect primary (master.Suspects).
func Probe(ctx context.Context, cc grpc.ClientConnInterface, job string, slot int32) error {
	_, err := pb.NewPServerClient(cc).Pull(ctx, &pb.PullRequest{Job: job, Slot: slot, Tensors: []*pb.Tensor{{Name: ProbeParam}}})
	if Transport(err) {
		return err
	}
	return nil
}

// suspects runs a Client's reports: one in flight per slot.
type suspects struct {
	mu       sync.Mutex
	inflight map[int32]bool
	moved    map[int32]chan struct{} // closed when a report says the slot moved
}

// movedCh returns the channel closed when a report says slot moved
// (the next report's, if none is in flight).
func (s *suspects) movedCh(slot int32) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.moved == nil {
		s.moved = map[int32]chan struct{}{}
	}
	ch := s.moved[slot]
	if ch == nil {
		ch = make(chan struct{})
		s.moved[slot] = ch
	}
	return ch
}

// report sends (slot, addr, err) to r in the background unless a report
// of slot is in flight.
func (s *suspects) report(r SuspectReporter, slot int32, addr string, err error) {
	s.mu.Lock()
	if s.inflight == nil {
		s.inflight = map[int32]bool{}
	}
	if s.inflight[slot] {
		s.mu.Unlock()
		return
	}
	s.inflight[slot] = true
	s.mu.Unlock()
	go func() {
		defer func() {
			s.mu.Lock()
			delete(s.inflight, slot)
			s.mu.Unlock()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), ReportTimeout)
		defer cancel()
		if r(ctx, slot, addr, err) {
			s.mu.Lock()
			if ch := s.moved[slot]; ch != nil {
				close(ch)
				delete(s.moved, slot)
			}
			s.mu.Unlock()
		}
	}()
}
