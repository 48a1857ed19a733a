package agent

import (
	"context"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/raftstore/storetest"
	"github.com/raftps/raftps/schema"
)

// fakeMeta is the agent tests' metadata store: raftstore/storetest (the
// real state machine without Raft) holds the keys, txns and leases, and
// fakeMeta adds the tests' hooks: a stubbed job list and event log (the
// specs here are slot-only, not specs the job queue would admit), lease
// loss (expireLease), a partition (setUnreachable: every lease call fails
// with Unavailable), Ranges that block (blockRanges) and counters.
type fakeMeta struct {
	*storetest.Store

	mu     sync.Mutex
	jobs   []*pb.JobStatus
	events []*pb.JobEvent
	// unreachable makes every lease call fail with Unavailable (a node cut
	// off from the leader: it cannot tell whether its lease still lives).
	unreachable bool
	keepalives  int
	jobsCalls   int // Jobs calls: one per reconciliation round
	// A Range whose key starts with slowPrefix signals slowEntered and
	// waits for slowGate to close (a restore stuck reading pointers).
	slowPrefix  string
	slowGate    chan struct{}
	slowEntered chan struct{}
}

var _ Meta = (*fakeMeta)(nil)

func newFakeMeta() *fakeMeta { return &fakeMeta{Store: storetest.New()} }

var errUnreachable = status.Error(codes.Unavailable, "fake: leader unreachable")

// blockRanges makes Ranges under prefix block until the returned release
// is called; entered receives once per blocked Range.
func (f *fakeMeta) blockRanges(prefix string) (entered <-chan struct{}, release func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.slowPrefix, f.slowGate, f.slowEntered = prefix, make(chan struct{}), make(chan struct{}, 16)
	gate := f.slowGate
	var once sync.Once
	return f.slowEntered, func() { once.Do(func() { close(gate) }) }
}

func (f *fakeMeta) keepaliveCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.keepalives
}

func (f *fakeMeta) setJobs(js ...*pb.JobStatus) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.jobs = js
}

func (f *fakeMeta) setUnreachable(v bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unreachable = v
}

func (f *fakeMeta) isUnreachable() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.unreachable
}

// expireLease ends lease id as its TTL running out would: its keys go.
func (f *fakeMeta) expireLease(id int64) {
	if err := f.Expire(id); err != nil {
		panic(err)
	}
}

// must panics on a refused write of a test's own setup (a broken test).
func must[R any](r R, err error) R {
	if err != nil {
		panic(err)
	}
	return r
}

func (f *fakeMeta) get(key string) *pb.KeyValue {
	r := must(f.Store.Range(context.Background(), &pb.RangeRequest{Key: []byte(key)}))
	if len(r.Kvs) == 0 {
		return nil
	}
	return proto.Clone(r.Kvs[0]).(*pb.KeyValue)
}

// put writes key under lease (0: none) and returns the write's revision.
func (f *fakeMeta) put(key string, val []byte, lease int64) int64 {
	return must(f.Put(context.Background(), &pb.PutRequest{Key: []byte(key), Value: val, Lease: lease})).GetHeader().GetRevision()
}

func (f *fakeMeta) del(key string) {
	must(f.DeleteRange(context.Background(), &pb.DeleteRangeRequest{Key: []byte(key)}))
}

// deletePrefix deletes every key under prefix (a job delete).
func (f *fakeMeta) deletePrefix(prefix string) {
	key, end := schema.PrefixRange(prefix)
	must(f.DeleteRange(context.Background(), &pb.DeleteRangeRequest{Key: key, RangeEnd: end}))
}

// revision is the store's revision.
func (f *fakeMeta) revision() int64 { return f.FSM().Revision() }

func (f *fakeMeta) Range(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	f.mu.Lock()
	if f.slowPrefix != "" && strings.HasPrefix(string(r.GetKey()), f.slowPrefix) {
		gate, entered := f.slowGate, f.slowEntered
		f.mu.Unlock()
		select {
		case entered <- struct{}{}:
		default:
		}
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	} else {
		f.mu.Unlock()
	}
	return f.Store.Range(ctx, r)
}

func (f *fakeMeta) LeaseGrant(ctx context.Context, req *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	if f.isUnreachable() {
		return nil, errUnreachable
	}
	return f.Store.LeaseGrant(ctx, req)
}

func (f *fakeMeta) LeaseKeepAlive(ctx context.Context, id int64) (int64, error) {
	f.mu.Lock()
	f.keepalives++
	unreachable := f.unreachable
	f.mu.Unlock()
	if unreachable {
		return 0, errUnreachable
	}
	return f.Store.LeaseKeepAlive(ctx, id)
}

func (f *fakeMeta) LeaseRevoke(ctx context.Context, req *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	if f.isUnreachable() {
		return nil, errUnreachable
	}
	return f.Store.LeaseRevoke(ctx, req)
}

func (f *fakeMeta) RecordJobEvent(_ context.Context, ev *pb.JobEvent) (*pb.JobEvent, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, proto.Clone(ev).(*pb.JobEvent))
	return ev, nil
}

func (f *fakeMeta) Jobs() []*pb.JobStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.jobsCalls++
	return f.jobs
}

// rounds is the number of reconciliation rounds an agent started.
func (f *fakeMeta) rounds() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.jobsCalls
}
