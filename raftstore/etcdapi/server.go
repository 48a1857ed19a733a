package etcdapi

import (
	"context"
	"hash/fnv"
	"io"
	"time"

	"github.com/hashicorp/raft"
	etcdpb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/fsm"
	"github.com/raftps/raftps/gossip"
	"github.com/raftps/raftps/raftstore"
)

// Version is what Maintenance.Status reports as the server version: the
// etcd API version whose semantics this package follows.
const Version = "3.6.0"

// VersionHeader is the gRPC response header in which Maintenance.Status
// gives raftps's own version (internal/version), beside the etcd API
// version in the answer's Version field.
const VersionHeader = "raftps-version"

// Store is what the etcd services need of the Raft store.
// *raftstore.Store implements it.
type Store interface {
	raftstore.KV
	raftstore.Lessor
	WatchShared(ctx context.Context, req *pb.WatchRequest, id int64, out chan<- raftstore.WatchEvent) error
	LeaseOwner(ctx context.Context, id int64) (string, error)
	LinearizableRead(ctx context.Context) error
	Configuration() ([]raft.Server, error)
	Stats() raftstore.Status
	FSM() *fsm.FSM
	// MaxTxnOps is the most ops a txn may hold in its compares and in
	// each branch (raftstore.Config.MaxTxnOps, etcd's --max-txn-ops).
	MaxTxnOps() int
}

var _ Store = (*raftstore.Store)(nil)

// Members is the gossip view MemberList reads client addresses from.
// *gossip.Gossip implements it.
type Members interface {
	Member(id string) (gossip.Member, bool)
}

var _ Members = (*gossip.Gossip)(nil)

// Server implements etcdserverpb's KV, Watch, Lease, Cluster and
// Maintenance services over a Store. Register it with Register.
type Server struct {
	store   Store
	members Members

	// ProgressInterval is how often a watcher created with
	// progress_notify gets an empty response carrying the revision up to
	// which it has seen every event (etcd's default: 10 minutes). Set it
	// before Register.
	ProgressInterval time.Duration
	// MaxWatchersPerStream is the most watchers one Watch stream may hold
	// (default DefaultMaxWatchersPerStream); a create past it is answered
	// created and canceled with a reason naming the cap. The store caps
	// watchers per connection and per node too (raftstore.Config). Set it
	// before Register.
	MaxWatchersPerStream int
}

// DefaultMaxWatchersPerStream is Server.MaxWatchersPerStream's default.
const DefaultMaxWatchersPerStream = 1000

// New returns a Server over store; members may be nil (MemberList then
// lists no client URLs).
func New(store Store, members Members) *Server {
	return &Server{store: store, members: members, ProgressInterval: defaultProgressInterval, MaxWatchersPerStream: DefaultMaxWatchersPerStream}
}

// Register registers the services on g: the five served, and Auth,
// whose every method answers Unimplemented (authDesc).
func (s *Server) Register(g grpc.ServiceRegistrar) {
	etcdpb.RegisterKVServer(g, kvServer{s: s})
	etcdpb.RegisterWatchServer(g, watchServer{s: s})
	etcdpb.RegisterLeaseServer(g, leaseServer{s: s})
	etcdpb.RegisterClusterServer(g, clusterServer{s: s})
	etcdpb.RegisterMaintenanceServer(g, maintenanceServer{s: s})
	g.RegisterService(&authDesc, struct{}{})
}

// ServiceNames are the full names of the services Register registers.
var ServiceNames = []string{
	etcdpb.KV_ServiceDesc.ServiceName,
	etcdpb.Watch_ServiceDesc.ServiceName,
	etcdpb.Lease_ServiceDesc.ServiceName,
	etcdpb.Cluster_ServiceDesc.ServiceName,
	etcdpb.Maintenance_ServiceDesc.ServiceName,
	etcdpb.Auth_ServiceDesc.ServiceName,
}

// MemberID is the etcd member id of the raftps node id (FNV-1a 64; never
// 0, etcd's "no member").
func MemberID(id string) uint64 {
	if id == "" {
		return 0
	}
	h := fnv.New64a()
	_, _ = io.WriteString(h, id)
	if v := h.Sum64(); v != 0 {
		return v
	}
	return 1
}

// header is etcd's response header at revision rev (0: the store's
// current revision).
func (s *Server) header(rev int64) *etcdpb.ResponseHeader {
	st := s.store.Stats()
	if rev == 0 {
		rev = st.Revision
	}
	return &etcdpb.ResponseHeader{ClusterId: MemberID(st.ClusterID), MemberId: MemberID(st.ID),
		Revision: rev, RaftTerm: st.Term}
}
